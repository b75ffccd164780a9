"""One module per ``swa-kit`` subcommand (see :mod:`swa_kit.cli`), and the table the CLI lists them from.

The table holds each command's module and help line, so ``swa-kit --help`` and a light command such as
``swa-kit window`` never import the other commands (and torch). ``tests/test_cli.py`` keeps it in step with the
modules' own ``NAME`` and ``HELP``.

Where new work goes:

* a ``swa-kit`` subcommand: ``swa_kit/commands/NAME.py`` with ``NAME``, ``HELP``, ``add_arguments(parser)`` and
  ``run(args) -> int``, and its entry in ``COMMANDS``; then regenerate ``docs/cli.md`` with
  ``SWA_KIT_WRITE_DOCS=1 python -m pytest tests/test_cli.py -k cli_reference``
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    module: str  # the module under swa_kit.commands
    help: str  # its HELP, word for word


COMMANDS: dict[str, Command] = {
    "audit": Command("audit", "audit an SGLang launch: the backend, pools and routes SGLang picks, then findings "
                              "ranked by severity"),
    "bench": Command("bench", "benchmark sliding-window decode/prefill paths on this GPU (or show the recorded run)"),
    "bugs": Command("bugs", "known SGLang/vLLM/aiter sliding-window bugs by number; --replay runs the audit on them"),
    "doctor": Command("doctor", "report what this machine can run (torch, GPUs, Triton, aiter tiers, Jupyter) and "
                                "what is missing"),
    "explain": Command("explain", "show which kernel, window argument and page table SGLang uses per layer, what "
                                  "SGLang raises and what the kit judges"),
    "key-gap": Command("key_gap", "does one key short matter for my model? run a local Hugging Face model "
                                  "(transformers' own code) at its window W and at W-1 keys over one prompt: first "
                                  "diverging token, logit and KL gap"),
    "lab": Command("lab", "start JupyterLab on notebooks/ with a kernel that runs this Python (--dry-run prints the "
                          "command)"),
    "mask": Command("mask", "print or draw the attention mask of a forward mode (prefill, extend, decode, verify, "
                            "tree, chunked)"),
    "models": Command("models", "list the bundled models with KV bytes per token, what SGLang's start-up pool "
                                "sizing saves, and the per-request minimum beside it"),
    "probe": Command("probe", "measure which keys a path (or each SGLang aiter call site) really attends for a W-key "
                              "window"),
    "resolve": Command("resolve", "print the SWA-pool resolver decision table (legacy / naive / fixed x role x "
                                  "algorithm x model kind)"),
    "spec-demo": Command("spec_demo", "EAGLE and FROZEN_KV MTP drafts x legacy/naive/fixed resolvers: acceptance, "
                                      "agreement, errors; guard run"),
    "tour": Command("tour", "execute every notebook headless into an output folder (HTML, figures, summary.json)"),
    "window": Command("window", "print a window value in every API's convention and the keys it attends"),
}
