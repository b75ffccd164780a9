from swa_kit.cli import main

raise SystemExit(main())
