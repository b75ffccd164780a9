"""A fuzz test of the whole CLI: a seeded table of generated argument lists over every command.

Every case runs ``swa_kit.cli.main`` in-process under tight limits (:func:`swa_kit.budget.limits`), with its
wall time and traced peak memory measured; a sample also runs as a real process, whose exit status and
peak resident memory (``os.wait4``) are checked. For every input: no traceback, no crash, an exit status from
:class:`swa_kit.exit_codes.ExitCode`, one line on stderr for bad input, and a bounded time and memory. The
known-good inputs must still succeed with the status they promise.
"""

from __future__ import annotations

import io
import json
import os
import random
import resource
import subprocess
import sys
import time
import tracemalloc
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from swa_kit import budget
from swa_kit.cli import command_modules, main
from swa_kit.exit_codes import ExitCode

ROOT = Path(__file__).resolve().parents[1]
SEED, GENERATED = 11, 330
LIMIT_MEMORY, LIMIT_SECONDS = 512 << 20, 8.0  # what the kit may plan for one case here
CASE_SECONDS, CASE_TRACED_BYTES = 40.0, 768 << 20  # what one case may really take (imports and slow CI included)
PROCESS_RSS_BYTES = 4 << 30  # the test process's high-water mark after every case
CHILD_RSS_BYTES = 2 << 30

INTS = ["1", "2", "3", "7", "64", "128", "1000", "0", "-1", "-4", "99999999999999999999", "4611686018427387904",
        "4611686018427387905", "1e3", "1.5", "x", "", "nan", "0x10", " 5", "-0"]
WINDOWS = INTS + ["none", "null", "-1,-1", "1023,0", "(None, None)", "none,none", "[5, 0]", "__import__('os')",
                  "5,1", "True", "4,0,0", "{}"]
DEVICES = ["cpu", "cuda", "cuda:0", "cuda:7", "bogus", "mps", "", "cpu:0", "meta", "cuda:-1"]
CONVENTIONS = ["hf", "sglang", "flash_attn", "aiter_ck", "flashinfer", "aiter_unified", "aiter_v1", "flex",
               "flash_attn_4", "bogus", ""]
MASK_MODES = ["prefill", "extend", "decode", "verify", "tree", "chunked", "sideways"]
PARENTS = ["-1,0,0,1,1", "-1,0", "-1,2", "a,b", "", "-1,-1,-1", "0", "-2", "-1," * 40 + "-1"]
PROBE_PATHS = ["reference", "sglang_extend_attention", "aiter_emulated_paged_ragged", "torch_sdpa", "kit_triton_swa",
               "aiter_native_unified", "bogus"]
PROBE_MODES = ["prefill", "extend", "decode", "verify", "tree"]
MODELS = ["gemma3-27b", "gemma4-31b", "gpt-oss-120b", "bogus", "../../etc/passwd", ""]
EXPLAIN_MODES = ["decode", "extend", "prefill", "verify", "draft_decode", "bogus"]
SECONDS = ["0", "-1", "x", "nan", "inf", "-inf", "", "1e400"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Input and output paths: good, missing, a folder, malformed and odd files."""
    root = tmp_path_factory.mktemp("fuzz")
    made = {"dir": str(root), "missing": str(root / "missing.json"), "in_missing_dir": str(root / "no" / "x.json"),
            "devnull": "/dev/null", "slash": "/", "out_png": str(root / "out.png"), "out_json": str(root / "o.json")}
    for name, content in {"malformed": "{bad", "empty": "", "number": "7", "list": "[1, 2]",
                          "wrong_object": json.dumps({"schema": 1}), "binary": "\udcff"}.items():
        path = root / f"{name}.json"
        path.write_bytes(b"\xff\xfe\x00" if name == "binary" else content.encode())
        made[name] = str(path)
    made["recorded"] = str(next((ROOT / "data" / "bench").glob("*.json")))
    return made


def _pick(rng: random.Random, pool: list[str]) -> str:
    return rng.choice(pool)


def _maybe(rng: random.Random, *flags: str) -> list[str]:
    return [flag for flag in flags if rng.random() < 0.3]


class CaseMaker:
    """Draws argument lists for every command from pools of good and bad values."""

    def __init__(self, files: dict[str, str], seed: int) -> None:
        self.rng, self.files = random.Random(seed), files
        self.in_files = [files[k] for k in ("dir", "missing", "malformed", "empty", "number", "list", "wrong_object",
                                            "binary", "devnull", "slash", "recorded")]
        self.out_files = [files[k] for k in ("dir", "in_missing_dir", "out_png", "slash")]

    def window(self) -> list[str]:
        return ["window", "--from", _pick(self.rng, CONVENTIONS), _pick(self.rng, WINDOWS), *_maybe(self.rng, "--json")]

    def mask(self) -> list[str]:
        argv = ["mask", "--mode", _pick(self.rng, MASK_MODES), "--kv-len", _pick(self.rng, INTS)]
        for option, pool, chance in (("--q-len", INTS, 0.4), ("--window", WINDOWS, 0.8), ("--block", INTS, 0.4),
                                     ("--chunk", INTS, 0.2), ("--parents", PARENTS, 0.2),
                                     ("--convention", CONVENTIONS, 0.2), ("--png", self.out_files, 0.1)):
            if self.rng.random() < chance:
                argv += [f"{option}={_pick(self.rng, pool)}"]
        return argv + _maybe(self.rng, "--json")

    def probe(self) -> list[str]:
        which = ["--sglang-sites"] if self.rng.random() < 0.2 else ["--path", _pick(self.rng, PROBE_PATHS)]
        argv = ["probe", *which, f"--keys={_pick(self.rng, INTS)}", f"--device={_pick(self.rng, DEVICES)}"]
        if self.rng.random() < 0.5:
            argv += ["--mode", _pick(self.rng, PROBE_MODES)]
        return argv + _maybe(self.rng, "--json")

    def bench(self) -> list[str]:
        argv = ["bench", *_maybe(self.rng, "--json", "--require-gpu", "--quick")]
        if self.rng.random() < 0.7:
            argv += ["--recorded", _pick(self.rng, self.in_files)]
        if self.rng.random() < 0.3:
            argv += ["--out", _pick(self.rng, self.out_files + [self.files["out_json"]])]
        return argv

    def explain(self) -> list[str]:
        argv = ["explain", "--model", _pick(self.rng, MODELS), "--mode", _pick(self.rng, EXPLAIN_MODES)]
        if self.rng.random() < 0.4:
            argv += ["--topk", _pick(self.rng, INTS)]
        if self.rng.random() < 0.3:
            argv += ["--spec", _pick(self.rng, ["none", "eagle", "eagle3", "bogus"])]
        if self.rng.random() < 0.3:
            argv += ["--env", _pick(self.rng, ["SGLANG_USE_AITER_UNIFIED_ATTN=1", "BOGUS=1", "x", "=",
                                          "SGLANG_AITER_UNIFIED_VERIFY="])]
        return argv + _maybe(self.rng, "--json")

    def models(self) -> list[str]:
        return ["models", *([_pick(self.rng, MODELS)] if self.rng.random() < 0.7 else []), *_maybe(self.rng, "--json")]

    def doctor(self) -> list[str]:
        return ["doctor", "--aiter-timeout", _pick(self.rng, SECONDS)]  # bad values only: a real run probes aiter

    def tour(self) -> list[str]:  # bad input only: a good tour executes every notebook
        bad = self.rng.choice([["--cell-timeout", _pick(self.rng, SECONDS)], ["--notebooks", self.files["missing"]],
                               ["--notebooks", self.files["dir"], "--out", self.files["malformed"]],
                               ["--out", self.files["number"]]])
        return ["tour", *bad]

    def lab(self) -> list[str]:  # always --dry-run: never start a server here
        argv = ["lab", "--dry-run"]
        if self.rng.random() < 0.6:
            argv += ["--port", _pick(self.rng, INTS + ["65535", "65536", "8888"])]
        if self.rng.random() < 0.3:
            argv += ["--notebooks", _pick(self.rng, [self.files["dir"], self.files["missing"], self.files["number"]])]
        return argv

    def spec_demo(self) -> list[str]:  # values the bound refuses, or that argparse does
        return ["spec-demo", "--max-new-tokens", _pick(self.rng, ["0", "1", "-4", "5000", "99999999999999999999", "x",
                                                              "1e3", "2000"])]

    def resolve(self) -> list[str]:
        return ["resolve", *_maybe(self.rng, "--json", "--wrong", "--bogus")]

    def top(self) -> list[str]:
        return self.rng.choice([["--version"], ["--help"], [], ["bogus"], ["-x"], ["--version", "mask"], ["mask"]])


def generated_cases(files: dict[str, str], n: int = GENERATED, seed: int = SEED) -> list[list[str]]:
    """``n`` argument lists, every command, good and bad values mixed (reproducible from ``seed``)."""
    maker = CaseMaker(files, seed)
    weights = {"window": 5, "mask": 9, "probe": 3, "bench": 3, "explain": 3, "models": 1, "doctor": 1, "tour": 1,
               "lab": 2, "spec_demo": 1, "resolve": 1, "top": 1}
    pool = [getattr(maker, name) for name, weight in weights.items() for _ in range(weight)]
    cases: dict[tuple[str, ...], None] = {}  # distinct, in drawing order
    while len(cases) < n:
        cases.setdefault(tuple(maker.rng.choice(pool)()), None)
    return [list(case) for case in cases]


#: Inputs that must keep working, with the status they promise (CPU-only machine: no GPU).
GOOD = [
    (["--version"], 0), (["window", "--from", "sglang", "1023"], 0), (["window", "--from", "flash_attn_4", "none"], 0),
    (["window", "--from", "flash_attn", "-1,-1", "--json"], 0),
    (["mask", "--mode", "decode", "--kv-len", "12", "--window", "4"], 0),
    (["mask", "--mode", "prefill", "--kv-len", "40", "--window", "5", "--json"], 0),
    (["mask", "--mode", "tree", "--kv-len", "9", "--parents=-1,0,0,1,1", "--window", "3"], 0),
    (["mask", "--mode", "chunked", "--kv-len", "30", "--q-len", "9", "--chunk", "8"], 0),
    (["mask", "--mode", "prefill", "--kv-len", "1048576", "--window", "4096", "--block", "128"], 0),
    (["mask", "--mode", "extend", "--q-len", "3", "--kv-len", "4611686018427387904", "--window", "2", "--block", "2"],
     0),
    (["probe", "--path", "sglang_extend_attention", "--keys", "3", "--mode", "verify"], 1),  # takes no window
    (["probe", "--path", "reference", "--keys", "3", "--mode", "decode", "--json"], 0),
    (["probe", "--path", "kit_triton_swa", "--keys", "3"], 4),  # no GPU: nothing measured
    (["bench"], 0), (["bench", "--json"], 0), (["bench", "--require-gpu"], 4),
    (["explain", "--model", "gemma3-27b", "--mode", "decode"], 3),
    (["explain", "--model", "gemma3-27b", "--mode", "decode", "--env", "SGLANG_USE_AITER_UNIFIED_ATTN=1"], 0),
    (["models", "--json"], 0), (["resolve", "--wrong"], 0), (["lab", "--dry-run", "--port", "8888"], 0),
]


@dataclass
class Outcome:
    argv: list[str]
    code: object
    out: str
    err: str
    seconds: float
    traced_peak: int


def run_in_process(argv: list[str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with redirect_stdout(out), redirect_stderr(err), budget.limits(LIMIT_MEMORY, LIMIT_SECONDS):
            code: object = main(list(argv))
    except SystemExit as stop:  # argparse: --help, --version and its one-line errors
        code = stop.code or 0
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return Outcome(argv, code, out.getvalue(), err.getvalue(), seconds, peak)


def check(outcome: Outcome) -> list[str]:
    """What is wrong with one case's outcome (empty: nothing)."""
    problems = []
    if outcome.code not in {int(c) for c in ExitCode}:
        problems.append(f"exit status {outcome.code!r} is not in the table")
    if outcome.code == ExitCode.CRASHED:  # in the table, but a bug of the kit's: never an answer to any input
        problems.append(f"the kit crashed: {outcome.err.strip()}")
    if "Traceback" in outcome.err:  # stdout may quote one: the recorded benchmark holds a failed kernel's error
        problems.append("a traceback")
    if outcome.code == ExitCode.BAD_INPUT:
        lines = outcome.err.strip("\n").split("\n")
        if len(lines) != 1 or "error:" not in lines[0]:
            problems.append(f"bad input must be one error line on stderr, got {outcome.err!r}")
    if outcome.seconds > CASE_SECONDS:
        problems.append(f"took {outcome.seconds:.1f} s > {CASE_SECONDS} s")
    if outcome.traced_peak > CASE_TRACED_BYTES:
        problems.append(f"traced peak {outcome.traced_peak >> 20} MiB > {CASE_TRACED_BYTES >> 20} MiB")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if rss > PROCESS_RSS_BYTES:
        problems.append(f"process high-water mark {rss >> 20} MiB > {PROCESS_RSS_BYTES >> 20} MiB")
    return problems


def test_generated_cases_and_good_inputs(files):
    command_modules()  # import every command (and torch) once, so each case's time is its own work
    start = time.perf_counter()
    cases = [(argv, None) for argv in generated_cases(files)] + [(argv, want) for argv, want in GOOD]
    failures, slowest = [], (0.0, [])
    seen = {}
    for argv, want in cases:
        outcome = run_in_process(argv)
        problems = check(outcome)
        if want is not None and outcome.code != want:
            problems.append(f"a good input must exit {want}, got {outcome.code} ({outcome.err.strip()[-300:]!r})")
        if problems:
            failures.append(f"{argv}: {'; '.join(problems)}")
        seen[outcome.code] = seen.get(outcome.code, 0) + 1
        slowest = max(slowest, (outcome.seconds, argv))
    elapsed = time.perf_counter() - start
    print(f"\nCLI fuzz: {len(cases)} cases in {elapsed:.0f} s, exit statuses {dict(sorted(seen.items()))}, "
          f"slowest {slowest[0]:.1f} s {slowest[1]}")
    assert len(cases) >= 300
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures[:30])
    assert {0, 2} <= set(seen), seen  # the table reaches both good and bad inputs


def test_generated_cases_are_varied(files):
    cases = generated_cases(files)
    assert len({tuple(c) for c in cases}) == len(cases) == GENERATED
    assert {c[0] for c in cases if c} >= {"window", "mask", "probe", "bench", "explain", "models", "doctor", "tour",
                                          "lab", "spec-demo", "resolve"}


SUBPROCESS_SAMPLE = [
    (["--version"], 0), (["window", "--from", "hf", "0"], 2), (["window", "--from", "flash_attn_4", "none"], 0),
    (["lab", "--dry-run", "--port", "0"], 2), (["bogus"], 2),
    (["mask", "--mode", "decode", "--kv-len", "99999999999999999999", "--window", "4"], 2),
    (["probe", "--path", "reference", "--keys", "4", "--device", "bogus"], 2),
]


@pytest.mark.parametrize("argv, want", SUBPROCESS_SAMPLE, ids=[" ".join(a) or "-" for a, _ in SUBPROCESS_SAMPLE])
def test_a_sample_as_real_processes(argv, want):
    """Real exit statuses, stderr and the child's own peak resident memory (os.wait4)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "swa_kit", *argv], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env, text=True)
    err = child.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(child.pid, 0)  # the child's own rusage, before Popen reaps it
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    assert child.returncode == want, err
    assert "Traceback" not in err and (want != 2 or err.count("\n") == 1), err
    assert seconds < CASE_SECONDS and usage.ru_maxrss * 1024 < CHILD_RSS_BYTES, (seconds, usage.ru_maxrss)


# -- item 5's families: nested JSON, non-finite numbers, special files, typed-field mutations -------------------
# Each runs swa_kit.cli.main in-process on fresh random inputs (hypothesis); the property is an exit status in
# {0, 1, 2, 3, 4} and no traceback. `swa-kit bugs` reads only the shipped corpus (no user path), so it has no family.

ANSWERS = {0, 1, 2, 3, 4}
BUNDLED = ROOT / "data" / "models"
TRACE = ROOT / "data" / "traces" / "gemma4-31b_decode_aiter_cpu.jsonl"
SPECIAL = dict(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def answers(argv: list[str]) -> Outcome:
    """Run ``argv``; fail unless it exits with an answer (never a crash) and prints no traceback."""
    outcome = run_in_process(argv)
    problems = [p for p in check(outcome) if "took" not in p]  # time is the table test's to bound
    assert outcome.code in ANSWERS and not problems, (argv[:6], outcome.code, problems, outcome.err[-600:])
    return outcome


@pytest.fixture(scope="module")
def formats(tmp_path_factory) -> dict[str, object]:
    """A known-good document of every format the kit reads, and a folder to write mutants into."""
    from transformers import MistralConfig

    root = tmp_path_factory.mktemp("formats")
    model = root / "model"  # key-gap reads the config (no weights needed before the prompt file)
    MistralConfig(sliding_window=8).save_pretrained(model)
    recorded = json.loads(next((ROOT / "data" / "bench").glob("*.json")).read_text())
    for name in ("decode", "decode_in_verify_tile", "decode_over_verify_keys_in_verify_tile", "skipped", "targets"):
        recorded[name] = recorded[name][:4]
    recorded["prefill"] = recorded["prefill"][:3]
    return {"root": root, "model": str(model), "recorded": recorded,
            "config": json.loads((BUNDLED / "gemma4-31b.json").read_text())["hf_config"],
            "trace": [json.loads(line) for line in TRACE.read_text().splitlines()[:4]],
            "server_args": {"model_path": "'m'", "attention_backend": "'aiter'", "page_size": "16",
                            "mem_fraction_static": "0.85", "swa_full_tokens_ratio": "0.8", "context_length": "8192"}}


def _write(formats: dict, name: str, text: str) -> str:
    path = Path(formats["root"]) / name  # type: ignore[arg-type]
    path.write_text(text)
    return str(path)


def _nodes(value: object, path: tuple = ()) -> list[tuple]:
    """Every path into a JSON document (object keys and list indices), the root excluded."""
    out = []
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in children:
        out.append((*path, key))
        out += _nodes(child, (*path, key))
    return out


def _replace(document: object, path: tuple, new: object, delete: bool = False) -> object:
    copy = json.loads(json.dumps(document))
    holder = copy
    for key in path[:-1]:
        holder = holder[key]
    if delete:
        del holder[path[-1]]
    else:
        holder[path[-1]] = new
    return copy


def _argv(formats: dict, kind: str, document: object) -> list[str]:
    """The command that reads ``document`` as a ``kind`` file."""
    if kind == "config":
        return ["audit", "--hf-config", _write(formats, "config.json", json.dumps(document))]
    if kind == "trace":
        lines = "\n".join(json.dumps(r) for r in document)  # type: ignore[attr-defined]
        return ["audit", "--model", "gemma4-31b", "--trace", _write(formats, "trace.jsonl", lines)]
    return ["bench", "--recorded", _write(formats, "recorded.json", json.dumps(document))]


def _nested(depth: int, kind: str) -> str:
    return ("[" * depth + "]" * depth) if kind == "list" else ('{"a": ' * depth + "1" + "}" * depth)


@settings(**SPECIAL)
@given(data=st.data(), depth=st.integers(1, 100_000), shape=st.sampled_from(["list", "object"]),
       kind=st.sampled_from(["config", "trace", "recorded"]))
def test_nested_json_in_every_json_file(formats, data, depth, shape, kind):
    document = formats[kind]
    at = data.draw(st.sampled_from([()] + _nodes(document)[:400]))
    marker = "__NESTED__"
    mutant = json.dumps(_replace(document, at, marker) if at else marker)
    if kind == "trace":  # one record per line: nest inside one line
        mutant = "\n".join(json.dumps(r) for r in json.loads(mutant)) if at else mutant
    text = mutant.replace(json.dumps(marker), _nested(depth, shape))
    argv = _argv(formats, kind, {})
    Path(argv[-1]).write_text(text)
    outcome = answers(argv)
    if depth > 64:
        assert outcome.code == 2, outcome.err


NON_FINITE = ["inf", "-inf", "nan", "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e308", "-0"]
NUMERIC_FLAGS = [["audit", "--model", "gemma4-31b", "--gpu-memory-gib"], ["audit", "--model", "gemma4-31b",
                 "--weights-gib"], ["mask", "--mode", "decode", "--window", "4", "--kv-len"],
                 ["mask", "--mode", "prefill", "--kv-len", "9", "--window"], ["probe", "--path", "reference", "--keys"],
                 ["explain", "--model", "gemma3-27b", "--mode", "decode", "--topk"], ["lab", "--dry-run", "--port"],
                 ["spec-demo", "--max-new-tokens"], ["doctor", "--aiter-timeout"], ["tour", "--cell-timeout"],
                 ["probe", "--path", "reference", "--keys", "3", "--max-memory"],
                 ["probe", "--path", "reference", "--keys", "3", "--max-seconds"]]


@settings(**SPECIAL)
@given(flag=st.sampled_from(NUMERIC_FLAGS), value=st.sampled_from(NON_FINITE))
def test_non_finite_numbers_in_every_numeric_flag(flag, value):
    assume(flag[0] not in ("doctor", "tour") or value not in ("1e308", "-0"))  # a finite timeout runs them for real
    outcome = answers([*flag, value])
    if value not in ("1e308", "-0"):
        assert outcome.code == 2, (flag, value, outcome.err)


@settings(**SPECIAL)
@given(data=st.data(), kind=st.sampled_from(["config", "trace", "recorded", "server_args"]),
       value=st.sampled_from(NON_FINITE[:8]))
def test_non_finite_numbers_in_every_file_field(formats, data, kind, value):
    if kind == "server_args":
        fields = dict(formats["server_args"])
        fields[data.draw(st.sampled_from(sorted(fields)))] = value if value[0] in "-1" else f"float({value!r})"
        line = "server_args=ServerArgs(" + ", ".join(f"{k}={v}" for k, v in fields.items()) + ")"
        answers(["audit", "--model", "gemma4-31b", "--server-args", line])
        return
    document = formats[kind]
    numbers = [p for p in _nodes(document) if isinstance(_get(document, p), (int, float))
               and not isinstance(_get(document, p), bool)]
    at = data.draw(st.sampled_from(numbers))
    argv = _argv(formats, kind, document)
    text = Path(argv[-1]).read_text()
    marker = json.dumps("__NUMBER__")
    mutated = _argv(formats, kind, _replace(document, at, "__NUMBER__"))
    Path(mutated[-1]).write_text(Path(mutated[-1]).read_text().replace(marker, value))
    assert text != Path(mutated[-1]).read_text()
    outcome = answers(mutated)
    assert outcome.code == 2, (kind, at, value, outcome.err)  # no JSON reader of the kit takes a non-finite number


def _get(document: object, path: tuple) -> object:
    for key in path:
        document = document[key]  # type: ignore[index]
    return document


MUTANTS = ["x", "", [1, 2], {"a": 1}, None, True, -7, 0, 2 ** 70, 1.5, [[[]]]]


@settings(**{**SPECIAL, "max_examples": 60})
@given(data=st.data(), kind=st.sampled_from(["config", "trace", "recorded"]), delete=st.booleans(),
       mutant=st.sampled_from(MUTANTS))
def test_typed_field_mutations_of_every_json_format(formats, data, kind, delete, mutant):
    document = formats[kind]
    at = data.draw(st.sampled_from(_nodes(document)))
    answers(_argv(formats, kind, _replace(document, at, mutant, delete)))


SERVER_ARG_MUTANTS = ["'x'", "[1, 2]", "{}", "None", "True", "-5", "0", "10**40", "1e999", "(1,)", "{'a': [1]}",
                      "f(1)", "'" + "z" * 5000 + "'", "..."]


@settings(**SPECIAL)
@given(data=st.data(), mutant=st.sampled_from(SERVER_ARG_MUTANTS), delete=st.booleans())
def test_typed_field_mutations_of_server_args_lines(formats, data, mutant, delete):
    fields = dict(formats["server_args"])
    name = data.draw(st.sampled_from(sorted(fields)))
    if delete:
        del fields[name]
    else:
        fields[name] = mutant
    line = "server_args=ServerArgs(" + ", ".join(f"{k}={v}" for k, v in fields.items()) + ")"
    outcome = answers(["audit", "--model", "gemma4-31b", "--server-args", line])
    assert len(outcome.err) < 2000, outcome.err  # an echoed value is cut to 200 characters


def _special_files(root: Path) -> dict[str, str]:
    fifo, folder = root / "fifo", root / "empty_folder"
    if not fifo.exists():
        os.mkfifo(fifo)
    folder.mkdir(exist_ok=True)
    # A file without read permission is left out: the tests run as root here, and root reads it anyway.
    return {"/dev/zero": "/dev/zero", "/dev/null": "/dev/null", "fifo": str(fifo), "folder": str(folder),
            "missing": str(root / "missing.json")}


FILE_FLAGS = [["audit", "--hf-config"], ["audit", "--model", "gemma4-31b", "--draft-hf-config"],
              ["audit", "--model", "gemma4-31b", "--trace"], ["audit", "--model", "gemma4-31b", "--server-args"],
              ["bench", "--recorded"], ["key-gap", "--model", "MODEL", "--prompt-file"]]


@pytest.mark.parametrize("flag", FILE_FLAGS, ids=lambda f: f[-1])
@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null", "fifo", "folder", "missing"])
def test_special_files_in_every_file_flag(formats, flag, special):
    """Every (flag, special file) pair: a closed list, so all of them rather than a random draw."""
    path = _special_files(Path(formats["root"]))[special]
    argv = [formats["model"] if word == "MODEL" else word for word in flag]
    outcome = answers([*argv, path])
    assert outcome.code == 2 and outcome.err.count("\n") == 1, (argv, special, outcome.err)


@settings(**{**SPECIAL, "max_examples": 30})
@given(error=st.sampled_from([RuntimeError, KeyError, TypeError, AssertionError, IndexError, ZeroDivisionError]),
       message=st.text(max_size=300), command=st.sampled_from(["audit", "bench", "window"]))
def test_a_crash_never_exits_with_the_findings_code(error, message, command):
    from swa_kit.cli import command_module

    argv = {"audit": ["audit", "--model", "gemma4-31b"], "bench": ["bench"],
            "window": ["window", "--from", "hf", "4"]}[command]
    module = command_module(command)

    def crash(args):
        raise error(message)

    original, module.run = module.run, crash
    try:
        outcome = run_in_process(argv)
    finally:
        module.run = original
    assert outcome.code == ExitCode.CRASHED != ExitCode.DISAGREES, outcome
    assert "internal error" in outcome.err and "Traceback" not in outcome.err


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])
@pytest.mark.parametrize("value", ["x", "", "os", "float99"])
def test_a_config_dtype_that_is_no_torch_dtype_is_refused(formats, key, value):
    """transformers looks a dtype string up on torch and crashes on one it lacks (found by the mutations above)."""
    config = json.loads(json.dumps(formats["config"]))
    config["text_config"][key] = value
    outcome = answers(_argv(formats, "config", config))
    assert outcome.code == 2 and f"text_config.{key} is {value!r}, not a torch dtype" in outcome.err, outcome.err
