"""``swa-kit audit``: a real launch (config, server arguments, environment, platform, version) -> decisions,
findings."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from swa_kit.errors import UsageError
from swa_kit.models.configs import list_models
from swa_kit.engine.environment import ENV_VARS
from swa_kit.exit_codes import ExitCode
from swa_kit.launch.inputs import PLATFORMS
from swa_kit.sglang_versions import SGLANG_VERSION, SGLANG_VERSIONS, versions_help
from swa_kit.vllm_versions import VLLM_VERSION, VLLM_VERSIONS
from swa_kit.vllm_versions import versions_help as vllm_versions_help

if TYPE_CHECKING:
    from swa_kit.models.configs import ModelLayout
    from swa_kit.launch.inputs import Launch
    from swa_kit.measure.sglang_check import RawLaunch

ENGINES = ("sglang", "vllm", "both")

NAME = "audit"
HELP = "audit an SGLang launch: the backend, pools and routes SGLang picks, then findings ranked by severity"
STATUS_HELP = (f"exit codes: {int(ExitCode.OK)} = no finding above info; {int(ExitCode.DISAGREES)} = findings (wrong "
              "keys, SGLang's guard refusals, one key short, memory, a trace that differs from the plan); "
              f"{int(ExitCode.BAD_INPUT)} = bad input (unreadable config or trace, unknown architecture, conflicting "
              "arguments, unknown variable, a launch SGLang itself refuses at start-up, --check-with-sglang without "
              "SGLang installed), with one line naming the value and what is accepted; with --engine both, the worse "
              f"of the two engines' audits, and {int(ExitCode.BAD_INPUT)} also when one engine refuses the launch at "
              "start-up (the side by side is still printed, the refusal in that engine's column)")
JSON_SHAPE = ("--json prints one object: model {name, architecture, sources, config_path, config_sha256}, "
              "sglang_version, platform, server_args_line (the launch as SGLang logs it), env, decisions "
              "[{decision, value, source, how}], routes [{worker, mode, backend, kind, layers, kernel, window_arg, "
              "keys, page_table, sglang, kit}], findings [{severity, title, detail, ways_out: [alternatives], where, "
              "known_bugs: [lines]}] worst first, exit_code, versions {swa-kit, SGLang installed here, transformers}, "
              "command, and with --check-with-sglang sglang_check {version, fields [{field, kit, sglang, agree}]}. "
              "With --engine vllm: engine, model, platform, vllm_args, env, decisions, routes, kv_cache_groups, "
              "drafter_layers [{layer, attention, window, spec, block_size, group, reads_kv_of, "
              "writes_through_group}], admission [{group, spec, drafter, block_size, cap, blocks, tokens}], findings, "
              "exit_code. "
              "With --engine both: engine, model, launch [{meaning, sglang, vllm, how}], sglang and vllm {version, "
              "flags, refused, audit (that engine's own --json object)}, keys [{kind, layers, mode, sglang_kernel, "
              "sglang_window_arg, sglang_keys, vllm_kernel, vllm_window_arg, vllm_keys, meant}], memory [{quantity, "
              "sglang, vllm, how}], draft [{engine, what, value, how}], findings [{engine, severity, ...}], exit_code")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--hf-config PATH`` or ``--model NAME`` (exactly one), shared by every command that takes a model."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--hf-config", metavar="PATH", help="a config.json or a model directory holding one")
    group.add_argument("--model", choices=list_models(), metavar="NAME",
                       help="a bundled model (a shortcut carrying its config.json): " + ", ".join(list_models()))


def _unknown_flags_are_values(parser: argparse.ArgumentParser) -> None:
    """Let ``--server-args "--disable-hybrid-swa-memory"`` (one SGLang flag, no space) be the option's value.

    argparse reads a word that starts with ``--`` and holds no space as an option, so a lone SGLang flag
    would be "an unknown option" and ``--server-args`` would "expect one argument". A word that is no option
    of this command is read as a value instead; one that stands alone is still refused ("unrecognized").
    """
    parse_optional = parser._parse_optional

    def parse(arg_string: str) -> object:
        parsed = parse_optional(arg_string)
        tuples = parsed if isinstance(parsed, list) else [parsed] if parsed else []  # a list from Python 3.12.7
        return None if tuples and all(t[0] is None for t in tuples) else parsed

    parser._parse_optional = parse  # type: ignore[method-assign,assignment]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = f"{HELP}. {STATUS_HELP}. {JSON_SHAPE}"
    _unknown_flags_are_values(parser)
    add_model_arguments(parser)
    parser.add_argument("--engine", choices=ENGINES, default="sglang",
                        help=f"the engine audited: sglang (SGLang {SGLANG_VERSION}, the default) or vllm (vLLM "
                             f"{VLLM_VERSION} on ROCm; --server-args then holds `vllm serve` flags, and --env "
                             "vLLM's variables), or both (one launch on each, side by side: --server-args holds "
                             "SGLang's flags, --vllm-args vLLM's; a flag of the launch given on one side is written "
                             "in the other's spelling, one with no counterpart is refused by name)")
    parser.add_argument("--server-args", metavar="ARGS_OR_FILE", default=None,
                        help="SGLang's flags in quotes (\"--attention-backend aiter --page-size 16\"), or a file "
                             "holding the launch command or the logged server_args=ServerArgs(...) line")
    parser.add_argument("--vllm-args", metavar="ARGS_OR_FILE", default=None,
                        help="with --engine both (or vllm): the `vllm serve` flags in quotes, or a file holding the "
                             "command")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment variable, repeatable; accepted: " + ", ".join(ENV_VARS))
    parser.add_argument("--platform", default="rocm-gfx942", choices=list(PLATFORMS),
                        help="where the server runs (default rocm-gfx942)")
    parser.add_argument("--gpu-memory-gib", type=float, default=None,
                        help="GPU memory in GiB (default: the platform's typical GPU, labelled as assumed)")
    parser.add_argument("--weights-gib", type=float, default=None,
                        help="model weights per GPU in GiB, subtracted from the static memory budget")
    parser.add_argument("--sglang-version", default=SGLANG_VERSION, choices=SGLANG_VERSIONS,
                        help=versions_help())
    parser.add_argument("--vllm-version", default=VLLM_VERSION, choices=VLLM_VERSIONS,
                        help="with --engine vllm: " + vllm_versions_help())
    parser.add_argument("--draft-hf-config", metavar="PATH", default=None,
                        help="the draft model's config.json (what --speculative-draft-model-path points at; with "
                             "--engine vllm, what --speculative-config's model points at: its layers are placed "
                             "in vLLM's KV-cache groups)")
    parser.add_argument("--prompt-tokens", type=int, default=None, metavar="N",
                        help="with --engine vllm: the prompt whose admission is shown, per KV-cache group (default: "
                             "max_model_len)")
    parser.add_argument("--trace", metavar="FILE", default=None,
                        help="kernel calls recorded in the live server (.jsonl) by swa_kit.measure.trace (SGLang) or "
                             "swa_kit.measure.vllm_trace (--engine vllm), held against the plan: each difference is "
                             "a finding")
    parser.add_argument("--check-with-sglang", action="store_true",
                        help="also ask the SGLang installed here (its own parser, resolution, pool configurator and "
                             "model classes) the same launch, given raw, and report each field where the kit and "
                             "SGLang disagree as a finding; a launch the kit refuses is refused with SGLang's own "
                             "answer (needs SGLang; slower: SGLang imports)")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object (its shape: above)")
    out.add_argument("--markdown", action="store_true", help="print Markdown ready to paste into a bug report")


def _read_trace(path: str, engine: str) -> list:
    from swa_kit.measure.trace import read_records

    return read_records(path, engine)


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def command_line(args: argparse.Namespace) -> str:
    """The audit's command line, rebuilt from what was parsed (each value quoted for a shell)."""
    import shlex

    words = ["swa-kit", NAME] + (["--engine", args.engine] if args.engine != "sglang" else [])
    for option, value in (("--hf-config", args.hf_config), ("--model", args.model), ("--server-args", args.server_args),
                          ("--vllm-args", args.vllm_args),
                          ("--platform", args.platform), ("--gpu-memory-gib", args.gpu_memory_gib),
                          ("--weights-gib", args.weights_gib), ("--sglang-version", args.sglang_version),
                          ("--vllm-version", None if args.vllm_version == VLLM_VERSION else args.vllm_version),
                          ("--draft-hf-config", args.draft_hf_config), ("--prompt-tokens", args.prompt_tokens),
                          ("--trace", args.trace)):
        if value is not None:  # a value that starts with "-" must be joined to its option
            words += [f"{option}={value}"] if str(value).startswith("-") else [option, str(value)]
    for pair in args.env:
        words += ["--env", pair]
    words += ["--check-with-sglang"] if args.check_with_sglang else []
    words += ["--json"] if args.json else ["--markdown"] if args.markdown else []
    return shlex.join(words)


def _raw_launch(args: argparse.Namespace, launch: Launch) -> RawLaunch:
    """The launch as the user gave it (config path, server-argument words, draft config), for SGLang's parser."""
    from pathlib import Path

    from swa_kit.launch.inputs import flag_words, server_args_text
    from swa_kit.measure.sglang_check import RawLaunch

    text = server_args_text(args.server_args) or ""
    if "ServerArgs(" in text:
        raise UsageError("--check-with-sglang needs the launch's flags or command: a logged ServerArgs(...) line "
                         "holds SGLang's resolved values, not the words it was given")
    if launch.sglang_version != SGLANG_VERSION:
        raise UsageError(f"--check-with-sglang compares with the SGLang installed here, but --sglang-version "
                         f"{launch.sglang_version} models another: drop one of them")
    draft = None if launch.draft_model is None else launch.draft_model.path
    config = Path(args.hf_config) if args.hf_config is not None else launch.model.hf_config
    return RawLaunch(tuple(flag_words(text)), config, draft)


def _refuse_options(args: argparse.Namespace, engine: str, allowed: tuple[str, ...] = ()) -> None:
    """SGLang-only options given to another engine's audit: refused by name, never dropped."""
    given = [name for name, value, default in (("--sglang-version", args.sglang_version, SGLANG_VERSION),
                                               ("--draft-hf-config", args.draft_hf_config, None),
                                               ("--trace", args.trace, None),
                                               ("--check-with-sglang", args.check_with_sglang, False))
             if value != default and name not in allowed]
    if given:
        raise UsageError(f"{', '.join(given)}: SGLang's audit only; the {engine} audit does not read them yet "
                         "(audit --engine sglang for them)")


def _vllm_text(value: str | None) -> str:
    """vLLM's flags, or the text of a file holding the launch command."""
    from swa_kit.files import read_text
    from swa_kit.launch.inputs import MAX_ARGS_BYTES

    text = value or ""
    if os.path.isfile(text):
        text = read_text(text, "vLLM flags file", MAX_ARGS_BYTES)
    return text


def _load_model(args: argparse.Namespace) -> ModelLayout:
    from swa_kit.models.configs import load_hf_config, load_model

    return load_model(args.model) if args.model else load_hf_config(args.hf_config)


def run_vllm(args: argparse.Namespace) -> int:
    """``--engine vllm``: the vLLM launch's plan and findings; SGLang-only options are refused by name."""
    from swa_kit.launch.inputs import env_pairs
    from swa_kit.launch.vllm_args import parse_vllm_flags
    from swa_kit.launch.vllm_drafter import read_drafter_file
    from swa_kit.launch.vllm_plan import plan
    from swa_kit.measure.vllm_audit import audit_vllm, render_vllm, render_vllm_json
    from swa_kit.measure.vllm_bug_match import match_vllm

    _refuse_options(args, "vLLM", allowed=("--draft-hf-config", "--trace"))
    if args.server_args is not None and args.vllm_args is not None:
        raise UsageError("--engine vllm reads vLLM's flags from --server-args or --vllm-args: give one of them")
    text = _vllm_text(args.vllm_args if args.vllm_args is not None else args.server_args)
    drafter = None if args.draft_hf_config is None else read_drafter_file(args.draft_hf_config)
    report = audit_vllm(plan(_load_model(args), parse_vllm_flags(text), env_pairs(args.env), args.platform,
                             args.gpu_memory_gib, args.weights_gib, args.vllm_version, drafter, args.prompt_tokens),
                        None if args.trace is None else _read_trace(args.trace, "vllm"))
    known = {m.finding: m.lines() for m in match_vllm(report)}
    print(render_vllm_json(report, known) if args.json else render_vllm(report, args.markdown, known))
    return report.exit_code


def run_both(args: argparse.Namespace) -> int:
    """``--engine both``: one launch on SGLang and on vLLM, side by side; each engine's refusal stays in its column."""
    import sys

    from swa_kit.launch.inputs import env_pairs
    from swa_kit.measure.both_audit import audit_both, render, render_json

    _refuse_options(args, "two-engine", allowed=("--sglang-version", "--draft-hf-config"))
    report = audit_both(hf_config=args.hf_config, model=args.model, server_args=args.server_args,
                        vllm_args=_vllm_text(args.vllm_args), env=env_pairs(args.env), platform=args.platform,
                        gpu_memory_gib=args.gpu_memory_gib, weights_gib=args.weights_gib,
                        sglang_version=args.sglang_version, draft_hf_config=args.draft_hf_config,
                        vllm_version=args.vllm_version, prompt_tokens=args.prompt_tokens)
    print(render_json(report) if args.json else render(report, markdown=args.markdown, command=command_line(args)))
    for engine, refusal in (("SGLang", report.sglang_refusal), ("vLLM", report.vllm_refusal)):
        if refusal:
            print(f"swa-kit audit: no {engine} plan for this launch: {refusal}", file=sys.stderr)
    return report.exit_code


def run(args: argparse.Namespace) -> int:
    if args.engine == "vllm":
        return run_vllm(args)
    if args.engine == "both":
        return run_both(args)
    if args.vllm_args is not None:
        raise UsageError("--vllm-args: vLLM's flags, read with --engine both or --engine vllm")
    if args.prompt_tokens is not None:
        raise UsageError("--prompt-tokens: the vLLM audit's only (--engine vllm or both)")
    if args.vllm_version != VLLM_VERSION:
        raise UsageError(f"--vllm-version {args.vllm_version}: the vLLM audit's only (--engine vllm or both); "
                         "SGLang's release is --sglang-version")
    # builds pools and reads transformers: import when asked
    from swa_kit.measure.audit import ReportContext, audit, render, render_json
    from swa_kit.measure.bugs import match
    from swa_kit.launch.inputs import Launch, parse_env_pairs

    if args.check_with_sglang:  # before any work: one line naming how to install it
        from swa_kit.measure.sglang_check import installed_sglang

        installed_sglang()
    launch = Launch.from_inputs(hf_config=args.hf_config, model=args.model, server_args=args.server_args,
                                env=parse_env_pairs(args.env), platform=args.platform,
                                gpu_memory_gib=args.gpu_memory_gib, sglang_version=args.sglang_version,
                                draft_hf_config=args.draft_hf_config, weights_gib=args.weights_gib)
    raw = _raw_launch(args, launch) if args.check_with_sglang else None
    report = audit(launch, None if args.trace is None else _read_trace(args.trace, "sglang"), check_with=raw)
    context = ReportContext(
        versions={"swa-kit": _version("swa_kit"), "SGLang installed here": _version("sglang"),
                  "transformers": _version("transformers")},
        command=command_line(args), known_bugs={m.finding: m.lines() for m in match(report)})
    print(render_json(report, context) if args.json else render(report, markdown=args.markdown, context=context))
    return report.exit_code
