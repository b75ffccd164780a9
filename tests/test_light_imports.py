"""What a light entry point must not pull in, checked in a fresh interpreter (sys.modules, not timing)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

MARK = "--loaded--"


def loaded_after(code: str, watched: tuple[str, ...]) -> set[str]:
    """The modules in ``sys.modules`` after running ``code`` in a new interpreter that are, or lie under, one of
    ``watched`` (packages or modules)."""
    probe = f"{code}\nimport sys\nprint({MARK!r} + __import__('json').dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    modules = json.loads(result.stdout.rsplit(MARK, 1)[1])
    return {name for name in modules if any(name == w or name.startswith(w + ".") for w in watched)}


def test_the_workshop_solutions_do_not_import_matplotlib():
    from swa_kit.lessons import workshop

    modules = sorted(module.name for module in pkgutil.iter_modules(workshop.__path__))
    assert len(modules) == 9  # one per notebook (00-07), and the verdict
    assert not loaded_after(f"from swa_kit.lessons.workshop import {', '.join(modules)}", ("matplotlib",))
    # the check can fail: the mask pictures do import it
    assert "matplotlib" in loaded_after("import swa_kit.viz.masks", ("matplotlib",))


def test_the_cli_answers_help_and_window_without_torch():
    for argv in (["--help"], ["window", "--from", "hf", "1024"], ["window", "--help"]):
        code = f"from swa_kit.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"
        assert not loaded_after(code, ("torch", "matplotlib", "numpy")), argv
    # the check can fail: a command that needs torch does import it when it runs
    assert "torch" in loaded_after("from swa_kit.cli import main\nmain(['mask', '--mode', 'decode', '--kv-len', '4', "
                                   "'--window', '2'])", ("torch",))


#: What listing or choosing attention paths must not load: the modules that hold kernels, Triton and aiter.
KERNELS = ("triton", "aiter", "swa_kit.attention.torch_paths", "swa_kit.attention.aiter.native",
           "swa_kit.attention.aiter.emulated", "swa_kit.attention.aiter.triton_kernels", "swa_kit.attention.kit")


def test_listing_and_choosing_paths_load_no_kernel():
    for code in ("from swa_kit.attention.paths import all_paths\nprint([p.name for p in all_paths()])",
                 "from swa_kit.cli import main\ntry:\n    main(['probe', '--help'])\nexcept SystemExit:\n    pass",
                 "from swa_kit.engine import routing\nrouting.plan('gemma3-27b', 'decode', strict=False)\n"
                 "routing.plan('gemma4-31b', 'decode')\nrouting.plan('gemma4-31b', 'extend')"):
        assert not loaded_after(code, KERNELS), code
    # the check can fail: asking a path whether it runs here imports its module, and only that one
    asked = "from swa_kit.attention.paths import get_path\nget_path('torch_sdpa').available()"
    assert loaded_after(asked, KERNELS) == {"swa_kit.attention.torch_paths"}


#: The [notebooks] extra's packages and what they bring: none of them may load where a base install must work.
NOTEBOOK_STACK = ("jupyterlab", "jupyter_server", "jupyter_client", "ipykernel", "IPython", "ipywidgets", "nbclient",
                  "nbconvert", "nbformat", "jupytext", "matplotlib", "psutil")


def test_the_cli_runs_without_the_notebook_stack():
    runs = {"import": "import swa_kit.cli",
            "--help": "from swa_kit.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
            "explain": "from swa_kit.cli import main\nmain(['explain', '--model', 'gemma4-31b', '--mode', 'decode'])",
            # tour's and lab's own modules load before their check for the extra runs
            "tour/lab parsers": "from swa_kit.cli import build_parser\nbuild_parser(load={'tour', 'lab'})"}
    for what, code in runs.items():
        assert not loaded_after(code, NOTEBOOK_STACK), what
    # the check can fail: a picture does import matplotlib, and the tour's kernel client jupyter_client
    assert "matplotlib" in loaded_after("import swa_kit.viz.masks", NOTEBOOK_STACK)
    assert "jupyter_client" in loaded_after("from swa_kit.lessons.tour import kernel_environment\n"
                                            "with kernel_environment():\n    pass", NOTEBOOK_STACK)


#: What planning must not load: torch and what it brings, transformers, kernels, pictures.
HEAVY = ("torch", "transformers", "triton", "matplotlib", "numpy")


def test_audit_and_models_plan_without_torch_or_transformers(tmp_path):
    """The audit of a bundled model (with its known-bug matching) and the model table: recorded pool decisions
    and recorded config reads, no torch, no transformers (a test on imports, not on time)."""
    def run(argv: list[str]) -> str:
        # an empty user cache: only the shipped records may spare transformers
        return (f"import os\nos.environ['SWA_KIT_CACHE_DIR'] = {str(tmp_path)!r}\nfrom swa_kit.cli import main\n"
                f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass")

    for argv in (["audit", "--model", "gemma4-31b"], ["audit", "--model", "gpt-oss-20b", "--server-args",
                 "--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-eagle-topk 1 "
                 "--speculative-num-draft-tokens 3", "--markdown"], ["models"]):
        assert not loaded_after(run(argv), HEAVY), argv
    # the check can fail: a config the kit has no record of is read through transformers (and torch)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
                                  "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
                                  "sliding_window": 128, "num_attention_heads": 8, "num_key_value_heads": 2,
                                  "head_dim": 64, "hidden_size": 512}))
    assert {"transformers", "torch"} <= loaded_after(run(["audit", "--hf-config", str(config)]), HEAVY)


def test_every_command_help_loads_nothing_heavy():
    from swa_kit.commands import COMMANDS

    for name in COMMANDS:
        code = f"from swa_kit.cli import main\ntry:\n    main([{name!r}, '--help'])\nexcept SystemExit:\n    pass"
        assert not loaded_after(code, HEAVY), name
