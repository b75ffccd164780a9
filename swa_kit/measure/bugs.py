"""Known bugs, by number: public SGLang, vLLM and aiter threads about sliding-window attention, replayed through the
audit of their engine.

The corpus is ``data/bugs/<id>.json``, one thread per file. :func:`load_corpus` reads and checks every file and
refuses a bad one by name (file and field); :func:`replay` builds an entry's launch, runs :func:`~swa_kit.measure.
audit.audit` on it and says whether the finding class the thread shows is raised; :func:`match` ties an audit's
findings to the entries of the same class and launch facts ("matches SGLang #38756, fixed in #38756").

An entry (every key required unless marked optional; no other key is accepted):

``id``
    ``sglang-<number>``, ``vllm-<number>`` or ``aiter-<number>``; equals the file's stem.
``repository``, ``number``, ``kind``, ``state``
    ``sgl-project/sglang``, ``vllm-project/vllm`` or ``ROCm/aiter``; the thread's number; ``issue`` or ``pr``;
    ``open``, ``closed`` or ``merged`` (a PR only).
``engine`` (optional)
    the engine whose audit replays the launch: ``sglang`` (the default) or ``vllm`` (a vLLM thread's must be).
``title``
    the thread in the kit's words (never the thread's own prose).
``fixed_by``
    the number of the PR in the same repository that fixed it, ``"open"`` when no fix is known, or
    ``"regressed"`` (a merged PR only): the PR fixed it, but SGLang :data:`~swa_kit.sglang_versions.SGLANG_VERSION`
    no longer has that change, so the failure is live again there (the audit says so, never "fixed in"); such an
    entry has no ``after_fix``.
``confirmed_by``
    ``search``: the thread itself was read in a search of public threads; ``notes``: the thread was not found in
    that search and is known from the maintainers' notes on the threads around it.
``launch``
    what to replay. An SGLang entry's: ``model`` (a bundled model name, or a config.json's fields as an object),
    ``server_args`` (SGLang's flags as typed, ``""`` for none), ``env`` (the routing variables), ``sglang_version``
    (``0.5.23`` or ``before-<N>``: 0.5.23 with PR #N's change undone, one of
    :data:`~swa_kit.sglang_versions.REVERTIBLE_FIXES`), ``platform``, and optionally ``draft_model`` (the draft's
    config.json fields as an object, what ``--draft-hf-config`` reads) and ``note`` (how this launch differs from
    the thread's own). A vLLM entry's is described in :mod:`swa_kit.measure.vllm_bug_launch` (``vllm_version`` in
    place of ``sglang_version``, ``server_args`` holding ``vllm serve`` flags).
``symptom``
    what users reported, in the kit's paraphrase.
``finding_class``
    one of :data:`~swa_kit.measure.bug_classes.FINDING_CLASSES`: what the audit must raise on the launch.
``audit_gap`` (optional)
    what the audit lacks to raise the class on this launch (a backend it does not plan, say). A class the audit
    cannot raise at all is a gap by itself (:attr:`~swa_kit.measure.bug_classes.FindingClass.lacks`). A gap
    replays with the class expected *not* to be raised, so a gap that closes fails the corpus test until the entry
    is updated.
``after_fix`` (optional)
    ``{"sglang_version": V}`` (``{"vllm_version": V}`` for a vLLM entry): replayed at V, the class must be gone
    (the fix the kit models).
``releases`` (optional; required by the corpus test on an SGLang entry fixed by a merged PR)
    where the fix lands among the SGLang releases on the package index, found by bisecting wheels on the fix's own
    code: ``{"last_without": V, "first_with": V2, "fix_code": {"file", "line"}}`` (optionally ``"runs"``: one of
    :data:`RELEASE_RUNS`, the decision CI runs from both releases' own code), or ``{"none": why}`` where no release
    pair stands for the entry (the fix is in no release, the failure never shipped in one, or it is not bisected).
    ``fix_code.file`` is a path inside the wheel (``sglang/srt/...py``) and ``fix_code.line`` a line the fix added
    (compared without its indentation): CI checks that it is in that file of V2 and not in that file of V.
``evidence``
    where the failure lives: a non-empty list of ``{"file", "function", "at", "line"}``: ``at`` names the source
    read (``sglang 0.5.23``, an aiter release, or ``the thread's diff`` where the code moved since), ``line`` is a
    line in it or null.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swa_kit.errors import LaunchRefusedError, SwaKitError, UsageError
from swa_kit.launch.backend import choose_backend
from swa_kit.launch.inputs import PLATFORMS, SGLANG_VERSIONS, Launch, Platform, parse_server_args
from swa_kit.engine.spec_algorithms import EAGLE_FAMILY_HANDLER, SpeculativeAlgorithm
from swa_kit.engine.environment import check_env
from swa_kit.measure.audit import Audit, Finding, audit
from swa_kit.measure.bug_classes import FINDING_CLASSES, REFUSAL_TITLE, finding_classes
from swa_kit.measure.vllm_bug_launch import VLLM_LAUNCH_KEYS, LaunchFieldError, VllmLaunchSpec, read_launch
from swa_kit.measure.vllm_bug_launch import findings as vllm_findings
from swa_kit.models.configs import list_models, load_model, parse_hf_config
from swa_kit.resources import data_path
from swa_kit.sglang_versions import SGLANG_VERSION
from swa_kit.vllm_versions import VLLM_VERSION, VLLM_VERSIONS

BUGS_DIR = data_path("bugs")
REPOSITORIES = {"sgl-project/sglang": ("sglang", "SGLang"), "vllm-project/vllm": ("vllm", "vLLM"),
                "ROCm/aiter": ("aiter", "aiter")}
ENGINES = ("sglang", "vllm")  # whose audit replays an entry's launch
MAX_ENTRY_BYTES = 64 * 1024  # an entry is a page of text; anything larger is not one
MAX_TEXT = 1200  # characters in one text field


class BugEntryError(UsageError):
    """A corpus entry that is missing, malformed or inconsistent (the message names its file and field)."""


#: The decisions CI runs from an older release's own source, on CPU, next to the kit's ``before-<N>`` answer
#: (tests/test_bugs_releases.py implements each; an entry names one in ``releases.runs``).
RELEASE_RUNS: dict[str, str] = {
    "aiter-resolver": "the SWA pool aiter's backend translates against, from AiterAttnBackend's own code on "
                      "stand-in runners and pools",
    "trtllm-resolver": "the SWA pool trtllm_mha's backend translates against, from TRTLLMHAAttnBackend's own code "
                       "on stand-in runners and pools",
    "gemma4-window": "the window argument Gemma-4's sliding layers pass, from the model file's own code",
    "swa-draft-budget": "how many EAGLE draft layers the hybrid-SWA pool configurator counts in the budget, from "
                        "HybridSWAPoolConfigurator's own code on a stand-in runner",
    "trtllm-page-table": "whether each TRT-LLM kernel call of trtllm_mha passes a sliding layer its window and its "
                         "SWA page table, from the arguments of TRTLLMHAAttnBackend's own forward methods",
    "gemma4-aiter": "whether Gemma-4's backend allow-list takes aiter, from the release's own start-up assert",
    "llama4-trtllm-mha": "whether Llama-4's backend allow-list takes trtllm_mha, from the release's own start-up "
                         "assert",
    "unified-memory-dspark": "whether --enable-unified-memory admits DSPARK, from the release's own start-up "
                             "assert",
}
_RELEASE = re.compile(r"\d+\.\d+\.\d+(\.post\d+)?")


def release_key(version: str) -> tuple[int, ...]:
    """Order of SGLang releases ``0.5.12 < 0.5.12.post1 < 0.5.13``."""
    base, _, post = version.partition(".post")
    return (*(int(part) for part in base.split(".")), int(post) if post else -1)


@dataclass(frozen=True)
class Releases:
    """Where an entry's fix lands among the SGLang releases on the package index (or why no pair stands for it)."""

    last_without: str = ""
    first_with: str = ""
    fix_file: str = ""  # a path inside the wheel, sglang/...py
    fix_line: str = ""  # a line the fix added, without its indentation
    runs: str = ""  # one of RELEASE_RUNS, or "" where no decision is run from the releases' code
    none: str = ""  # why no release pair stands for the entry

    @property
    def label(self) -> str:
        """``0.5.19 -> 0.5.20``, or ``none``."""
        return f"{self.last_without} -> {self.first_with}" if self.first_with else "none"


@dataclass(frozen=True)
class Evidence:
    file: str
    function: str
    at: str
    line: int | None


@dataclass(frozen=True)
class LaunchSpec:
    model: str | Mapping[str, Any]
    server_args: str
    env: Mapping[str, str]
    sglang_version: str
    platform: str
    note: str = ""
    draft_model: Mapping[str, Any] | None = None

    @property
    def version(self) -> str:
        """The engine version the launch is replayed at."""
        return self.sglang_version


@dataclass(frozen=True)
class BugEntry:
    """One public thread: where it is, what users saw, the launch that shows it and the class the audit raises."""

    id: str
    repository: str
    number: int
    kind: str
    state: str
    title: str
    fixed_by: int | str
    confirmed_by: str
    launch: LaunchSpec | VllmLaunchSpec
    symptom: str
    finding_class: str
    evidence: tuple[Evidence, ...]
    audit_gap: str = ""
    after_fix: str | None = None  # the engine version at which the class must be gone
    engine: str = "sglang"  # whose audit replays the launch (ENGINES)
    releases: Releases | None = None  # where the fix lands among released wheels (None: not recorded)

    @property
    def gap(self) -> str:
        """What the audit lacks to raise this entry's class on its launch ("" when it replays)."""
        return self.audit_gap or FINDING_CLASSES[self.finding_class].lacks

    @property
    def label(self) -> str:
        """``SGLang #38756`` / ``aiter #1362``."""
        return f"{REPOSITORIES[self.repository][1]} #{self.number}"

    @property
    def fixed_label(self) -> str:
        """The fix column: ``open``, ``#N``, or ``#N, not in 0.5.23`` for a regressed fix."""
        if self.fixed_by == "regressed":
            return f"#{self.number}, not in {SGLANG_VERSION}"
        return "open" if self.fixed_by == "open" else f"#{self.fixed_by}"

    @property
    def replayed_at(self) -> str:
        """What the replay runs against: a release the kit mirrors, or a ``before-<N>`` setting and the release
        that setting stands for (where one is recorded)."""
        version = self.launch.version
        if version == (VLLM_VERSION if self.engine == "vllm" else SGLANG_VERSION):
            return f"release {version}"
        if self.releases is not None and self.releases.first_with:
            return f"{version} setting, for release {self.releases.last_without}"
        return f"{version} setting only"

    @property
    def releases_label(self) -> str:
        """The releases column: ``0.5.19 -> 0.5.20``, ``none`` (the entry says why), ``no fix``, or ``not recorded``."""
        if self.releases is not None:
            return self.releases.label
        return "no fix" if self.fixed_by == "open" else "not recorded"

    @property
    def fix_text(self) -> str:
        """What the audit and the listing say of the fix: ``no fix known``, ``fixed in #N``, or the regression."""
        if self.fixed_by == "regressed":
            return f"fixed in #{self.number}, but SGLang {SGLANG_VERSION} no longer has that fix"
        return "no fix known" if self.fixed_by == "open" else f"fixed in #{self.fixed_by}"


# -- reading and checking ---------------------------------------------------------------------------------------

_KEYS = {"id", "repository", "number", "kind", "state", "title", "fixed_by", "confirmed_by", "launch", "symptom",
         "finding_class", "evidence", "audit_gap", "after_fix", "engine", "releases"}
_OPTIONAL = {"audit_gap", "after_fix", "engine", "releases"}
_LAUNCH_KEYS = {"model", "server_args", "env", "sglang_version", "platform", "note", "draft_model"}
_EVIDENCE_KEYS = {"file", "function", "at", "line"}


def _fail(where: str, field: str, problem: str) -> BugEntryError:
    return BugEntryError(f"{where}: field {field!r}: {problem}")


def _keys(raw: Any, where: str, field: str, allowed: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _fail(where, field, f"must be a JSON object, got {type(raw).__name__}")
    unknown, missing = sorted(set(raw) - allowed), sorted(allowed - optional - set(raw))
    if unknown:
        raise _fail(where, f"{field}.{unknown[0]}" if field else unknown[0], f"unknown key; allowed: {sorted(allowed)}")
    if missing:
        raise _fail(where, f"{field}.{missing[0]}" if field else missing[0], "missing")
    return raw


def _text(raw: Mapping[str, Any], key: str, where: str, field: str | None = None, empty: bool = False) -> str:
    value = raw[key]
    if not isinstance(value, str) or (not empty and not value.strip()) or len(value) > MAX_TEXT:
        raise _fail(where, field or key, f"must be text of 1 to {MAX_TEXT} characters, got {str(value)[:80]!r}")
    return value


def _choice(raw: Mapping[str, Any], key: str, where: str, allowed: Iterable[str], field: str | None = None) -> str:
    allowed = list(allowed)
    if raw[key] not in allowed:
        raise _fail(where, field or key, f"{str(raw[key])[:80]!r} is not one of {', '.join(allowed)}")
    return raw[key]


def _count(value: Any, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(where, field, f"must be a whole number >= 1, got {str(value)[:80]!r}")
    return value


def _launch(raw: Any, where: str) -> LaunchSpec:
    raw = _keys(raw, where, "launch", _LAUNCH_KEYS, {"note", "draft_model"})
    model = raw["model"]
    if isinstance(model, str):
        _choice(raw, "model", where, list_models(), "launch.model")
    elif not isinstance(model, dict) or not model:
        raise _fail(where, "launch.model", "a bundled model name or a config.json's fields as an object")
    draft = raw.get("draft_model")
    if draft is not None and (not isinstance(draft, dict) or not draft):
        raise _fail(where, "launch.draft_model", "the draft's config.json fields as an object")
    env = raw["env"]
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise _fail(where, "launch.env", "must map variable names to text values")
    args = _text(raw, "server_args", where, "launch.server_args", empty=True)
    checks = (("launch.env", lambda: check_env(env)), ("launch.server_args", lambda: parse_server_args(args)))
    for field, check in checks:
        try:
            check()  # the audit's own reading: a value it refuses is refused here, by name
        except UsageError as error:
            raise _fail(where, field, str(error)) from None
    if draft is not None and parse_server_args(args).speculative_algorithm is None:
        raise _fail(where, "launch.draft_model", "a draft's config, but no --speculative-algorithm in "
                                                 "launch.server_args")
    return LaunchSpec(model=model, server_args=args, env=env,
                      sglang_version=_choice(raw, "sglang_version", where, SGLANG_VERSIONS, "launch.sglang_version"),
                      platform=_choice(raw, "platform", where, PLATFORMS, "launch.platform"),
                      note=_text(raw, "note", where, "launch.note") if "note" in raw else "", draft_model=draft)


def _vllm_launch(raw: Any, where: str) -> VllmLaunchSpec:
    raw = _keys(raw, where, "launch", VLLM_LAUNCH_KEYS, {"note", "draft_model"})
    texts = {k: _text(raw, k, where, f"launch.{k}", empty=k == "server_args")
             for k in ("server_args", "vllm_version", "platform", "note") if k in raw}
    try:
        return read_launch(raw, texts)  # the vLLM audit's own reading: a value it refuses is refused, by name
    except LaunchFieldError as error:
        raise _fail(where, error.field, error.problem) from None


def _release(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw[key]
    if not isinstance(value, str) or not _RELEASE.fullmatch(value) or \
            release_key(value) > release_key(SGLANG_VERSION):
        raise _fail(where, f"releases.{key}", f"must be an SGLang release up to {SGLANG_VERSION} (like 0.5.12.post1), "
                                              f"got {str(value)[:80]!r}")
    return value


def _releases(raw: Any, where: str, fixed_by: int | str) -> Releases:
    if isinstance(raw, dict) and set(raw) == {"none"}:
        return Releases(none=_text(raw, "none", where, "releases.none"))
    raw = _keys(raw, where, "releases", {"last_without", "first_with", "fix_code", "runs"}, {"runs"})
    if fixed_by == "open":
        raise _fail(where, "releases", "a release pair needs a fix; an open thread has none (give {\"none\": why})")
    before, after = _release(raw, "last_without", where), _release(raw, "first_with", where)
    if release_key(before) >= release_key(after):
        raise _fail(where, "releases.first_with", f"{after!r} must come after last_without {before!r}")
    code = _keys(raw["fix_code"], where, "releases.fix_code", {"file", "line"}, set())
    file, line = _text(code, "file", where, "releases.fix_code.file"), _text(code, "line", where,
                                                                             "releases.fix_code.line")
    if not re.fullmatch(r"sglang(/[A-Za-z0-9_]+)+\.py", file):
        raise _fail(where, "releases.fix_code.file", f"must be a .py path inside the wheel, sglang/..., got {file!r}")
    if line != line.strip() or "\n" in line or len(line) > 200:
        raise _fail(where, "releases.fix_code.line", "must be one line of code without its indentation, at most 200 "
                                                     "characters")
    runs = _choice(raw, "runs", where, RELEASE_RUNS, "releases.runs") if "runs" in raw else ""
    return Releases(before, after, file, line, runs)


def _evidence(raw: Any, where: str) -> tuple[Evidence, ...]:
    if not isinstance(raw, list) or not raw:
        raise _fail(where, "evidence", "must be a non-empty list of {file, function, at, line}")
    found = []
    for i, item in enumerate(raw):
        field = f"evidence[{i}]"
        item = _keys(item, where, field, _EVIDENCE_KEYS, set())
        line = item["line"]
        if line is not None:
            _count(line, where, f"{field}.line")
        file, function, at = (_text(item, k, where, f"{field}.{k}") for k in ("file", "function", "at"))
        found.append(Evidence(file, function, at, line))
    return tuple(found)


def parse_entry(raw: Any, where: str, stem: str | None = None) -> BugEntry:
    """One entry from its parsed JSON; ``where`` names it in errors and ``stem`` (the file's) must equal its id."""
    raw = _keys(raw, where, "", _KEYS, _OPTIONAL)
    repository = _choice(raw, "repository", where, REPOSITORIES)
    number = _count(raw["number"], where, "number")
    ident = f"{REPOSITORIES[repository][0]}-{number}"
    if raw["id"] != ident or (stem is not None and stem != ident):
        raise _fail(where, "id", f"{str(raw['id'])[:80]!r} must be {ident!r} (repository and number) and name "
                                 "the file")
    engine = _choice(raw, "engine", where, ENGINES) if "engine" in raw else "sglang"
    if (repository == "vllm-project/vllm") != (engine == "vllm") and repository != "ROCm/aiter":
        raise _fail(where, "engine", f"a {repository} thread is replayed on its own engine, not {engine!r}")
    kind = _choice(raw, "kind", where, ("issue", "pr"))
    state = _choice(raw, "state", where, ("open", "closed", "merged") if kind == "pr" else ("open", "closed"))
    fixed_by = raw["fixed_by"]
    if fixed_by not in ("open", "regressed"):
        _count(fixed_by, where, "fixed_by")
    if state == "merged" and fixed_by == "open":
        raise _fail(where, "fixed_by", "a merged PR is its own fix: give its number (or \"regressed\")")
    if fixed_by == "regressed" and (state != "merged" or "after_fix" in raw or engine != "sglang"):
        raise _fail(where, "fixed_by", f"\"regressed\" is a merged PR's fix that SGLang {SGLANG_VERSION} lacks: "
                                       "the entry must be a merged PR, with no after_fix")
    cls = FINDING_CLASSES.get(raw["finding_class"]) if isinstance(raw["finding_class"], str) else None
    if cls is None:
        raise _fail(where, "finding_class", f"{str(raw['finding_class'])[:80]!r} is not one of "
                                            f"{', '.join(FINDING_CLASSES)}")
    gap = _text(raw, "audit_gap", where) if "audit_gap" in raw else ""
    after = raw.get("after_fix")
    key, versions = ("vllm_version", VLLM_VERSIONS) if engine == "vllm" else ("sglang_version", SGLANG_VERSIONS)
    if after is not None:
        after = _choice(_keys(after, where, "after_fix", {key}, set()), key, where, versions, f"after_fix.{key}")
    launch = _vllm_launch(raw["launch"], where) if engine == "vllm" else _launch(raw["launch"], where)
    if after == launch.version or (after and (gap or cls.severity is None)):
        raise _fail(where, "after_fix", "must name another SGLang version than the launch's, on an entry that "
                                        "replays (no audit_gap)")
    return BugEntry(id=ident, repository=repository, number=number, kind=kind, state=state,
                    title=_text(raw, "title", where), fixed_by=fixed_by,
                    confirmed_by=_choice(raw, "confirmed_by", where, ("search", "notes")), launch=launch,
                    symptom=_text(raw, "symptom", where), finding_class=cls.name, evidence=_evidence(raw["evidence"],
                                                                                                       where),
                    audit_gap=gap, after_fix=after, engine=engine,
                    releases=_releases(raw["releases"], where, fixed_by) if "releases" in raw else None)


def read_entry(path: str | Path) -> BugEntry:
    """Read one entry file (bounded in size and depth); every error names the file."""
    path = Path(path)
    where = path.name
    try:
        size = path.stat().st_size
        if size > MAX_ENTRY_BYTES:
            raise BugEntryError(f"{where}: {size:,} bytes; an entry is at most {MAX_ENTRY_BYTES:,}")
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise BugEntryError(f"{where}: cannot read it ({type(error).__name__})") from None
    except json.JSONDecodeError as error:
        raise BugEntryError(f"{where}: not valid JSON ({error})") from None
    except RecursionError:
        raise BugEntryError(f"{where}: JSON nested too deeply to be an entry") from None
    return parse_entry(raw, where, path.stem)


def load_corpus(directory: str | Path | None = None) -> list[BugEntry]:
    """Every entry in ``directory`` (default: the shipped ``data/bugs``), sorted by id."""
    directory = Path(directory) if directory is not None else BUGS_DIR
    if not directory.is_dir():
        raise BugEntryError(f"{str(directory)!r}: no such folder of bug entries")
    return sorted((read_entry(p) for p in directory.glob("*.json")), key=lambda e: (e.repository, e.number))


def find_entry(corpus: Sequence[BugEntry], ident: str) -> BugEntry:
    for entry in corpus:
        if entry.id == ident:
            return entry
    raise UsageError(f"no bug entry {ident[:80]!r}; known: {', '.join(e.id for e in corpus)}")


# -- replaying an entry ------------------------------------------------------------------------------------------


def build_launch(entry: BugEntry, sglang_version: str | None = None) -> Launch:
    """The entry's launch as the audit reads it (at ``sglang_version`` instead of the entry's, when given)."""
    spec = entry.launch
    if not isinstance(spec, LaunchSpec):
        raise UsageError(f"{entry.id} is replayed by the vLLM audit (engine vllm): it has no SGLang launch")
    model = load_model(spec.model) if isinstance(spec.model, str) else \
        parse_hf_config(dict(spec.model), where=f"{entry.id}.json launch.model")
    draft = None if spec.draft_model is None else \
        parse_hf_config(dict(spec.draft_model), where=f"{entry.id}.json launch.draft_model")
    return Launch(model=model, server_args=parse_server_args(spec.server_args), env=check_env(spec.env),
                  platform=Platform.parse(spec.platform), sglang_version=sglang_version or spec.sglang_version,
                  draft_model=draft)


@dataclass(frozen=True)
class Replay:
    """What the audit said on an entry's launch, and whether that is what the corpus expects."""

    entry: BugEntry
    verdict: str  # raised | gone after the fix | NOT RAISED | still raised after the fix | gap | GAP CLOSED | refused
    ok: bool
    finding: Finding | None
    detail: str


def launch_findings(launch: Launch) -> list[Finding]:
    """The audit's findings; a launch SGLang refuses at start-up (the audit's one-line answer) is one finding."""
    try:
        return audit(launch).findings
    except LaunchRefusedError as error:
        return [Finding("raises", REFUSAL_TITLE, str(error), (), "start-up")]


def entry_findings(entry: BugEntry, version: str | None = None) -> list[Finding]:
    """The findings of the entry's engine's audit on its launch (at ``version`` instead of the launch's, if given)."""
    if isinstance(entry.launch, VllmLaunchSpec):
        return vllm_findings(entry.launch, f"{entry.id}.json", version)
    return launch_findings(build_launch(entry, version))


def _raised(entry: BugEntry, name: str, version: str | None = None) -> Finding | None:
    return next((f for f in entry_findings(entry, version) if name in finding_classes(f)), None)


def replay(entry: BugEntry) -> Replay:
    """Run the audit on the entry's launch (and after its fix): is its finding class raised where it should be?"""
    try:
        found = _raised(entry, entry.finding_class)
    except SwaKitError as error:  # the kit refuses the launch (an architecture or value it does not read)
        reason = " ".join(str(error).split())[:200]
        if entry.gap:
            return Replay(entry, "gap", True, None, f"the kit refuses the launch ({reason}); {entry.gap}")
        return Replay(entry, "refused", False, None, f"the kit refuses the launch: {reason}")
    if entry.gap:
        if found is None:
            return Replay(entry, "gap", True, None, entry.gap)
        return Replay(entry, "GAP CLOSED", False, found, f"the audit now raises {entry.finding_class}: drop the "
                                                         "entry's audit_gap (or give its class a severity)")
    if found is None:
        return Replay(entry, "NOT RAISED", False, None, f"no {entry.finding_class} finding on this launch")
    if entry.after_fix is None:
        return Replay(entry, "raised", True, found, f"{found.title} ({found.where})")
    after = _raised(entry, entry.finding_class, entry.after_fix)
    engine = "vLLM" if entry.engine == "vllm" else "SGLang"
    if after is not None:
        return Replay(entry, "still raised after the fix", False, after, f"at {engine} {entry.after_fix}: "
                                                                          f"{after.title}")
    return Replay(entry, "raised, gone after the fix", True, found, f"{found.title} ({found.where}); gone at "
                                                                    f"{engine} {entry.after_fix}")


# -- matching an audit's findings to the corpus ------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchFacts:
    """What a finding's mechanism depends on, beyond its class: the backends, the speculation, the version."""

    backends: frozenset[str]
    speculation: str | None  # "EAGLE family", another algorithm's name (vLLM: the drafter's method), or None
    version: str  # the engine's


def launch_facts(launch: Launch) -> LaunchFacts:
    choice = choose_backend(launch)
    algorithm = launch.server_args.speculative_algorithm
    in_family = algorithm is not None and \
        SpeculativeAlgorithm.from_string(algorithm).traits.handler == EAGLE_FAMILY_HANDLER
    family = "EAGLE family" if in_family else algorithm
    return LaunchFacts(frozenset({choice.prefill_attention_backend, choice.decode_attention_backend}), family,
                       launch.sglang_version)


def facts_match(entry: LaunchFacts, audited: LaunchFacts) -> bool:
    """The audited launch has the entry's backend and version, and its speculation where the entry has one."""
    return bool(entry.backends & audited.backends) and entry.version == audited.version and \
        (entry.speculation is None or entry.speculation == audited.speculation)


@dataclass(frozen=True)
class Match:
    finding: Finding
    entries: tuple[BugEntry, ...]

    def lines(self) -> list[str]:
        """What the audit prints under the finding: ``matches SGLang #38756, fixed in #38756``."""
        return [f"matches {e.label}, {e.fix_text}" for e in self.entries]


def match(report: Audit, corpus: Sequence[BugEntry] | None = None) -> list[Match]:
    """The known bugs under each finding of ``report``: same finding class, and the launch facts the entry needs."""
    corpus = load_corpus() if corpus is None else corpus
    audited = launch_facts(report.launch)
    facts: dict[str, LaunchFacts | None] = {}
    matches = []
    for finding in report.findings:
        classes = finding_classes(finding)
        hits = []
        for entry in (e for e in corpus if e.finding_class in classes and e.engine == "sglang"):
            if entry.id not in facts:
                try:
                    facts[entry.id] = launch_facts(build_launch(entry))
                except SwaKitError:  # a launch the kit refuses shares no facts with one it audited
                    facts[entry.id] = None
            known = facts[entry.id]
            if known is not None and facts_match(known, audited):
                hits.append(entry)
        if hits:
            matches.append(Match(finding, tuple(hits)))
    return matches


def entry_rows(corpus: Sequence[BugEntry]) -> list[dict[str, Any]]:
    """The corpus as table rows: id, title, fixed by, finding class, and whether it replays or is a gap."""
    return [{"id": e.id, "engine": e.engine, "title": e.title, "fixed_by": e.fixed_label,
             "finding_class": e.finding_class, "replays": "gap" if e.gap else "yes", "releases": e.releases_label,
             "replayed_at": e.replayed_at} for e in corpus]
