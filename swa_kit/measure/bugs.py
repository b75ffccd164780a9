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
    one of :data:`FINDING_CLASSES`: what the audit must raise on the launch.
``audit_gap`` (optional)
    what the audit lacks to raise the class on this launch (a backend it does not plan, say). A class the audit
    cannot raise at all is a gap by itself (:attr:`FindingClass.lacks`). A gap replays with the class expected *not*
    to be raised, so a gap that closes fails the corpus test until the entry is updated.
``after_fix`` (optional)
    ``{"sglang_version": V}`` (``{"vllm_version": V}`` for a vLLM entry): replayed at V, the class must be gone
    (the fix the kit models).
``evidence``
    where the failure lives: a non-empty list of ``{"file", "function", "at", "line"}``: ``at`` names the source
    read (``sglang 0.5.23``, an aiter release, or ``the thread's diff`` where the code moved since), ``line`` is a
    line in it or null.
"""

from __future__ import annotations

import json
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
from swa_kit.measure.vllm_drafter_audit import MISROUTED, NEVER_ADMITTED
from swa_kit.measure.vllm_bug_launch import VLLM_LAUNCH_KEYS, LaunchFieldError, VllmLaunchSpec, check_launch
from swa_kit.measure.vllm_bug_launch import findings as vllm_findings
from swa_kit.models.configs import list_models, load_model, parse_hf_config
from swa_kit.resources import data_path
from swa_kit.sglang_versions import SGLANG_VERSION
from swa_kit.vllm_versions import VLLM_VERSIONS

BUGS_DIR = data_path("bugs")
REPOSITORIES = {"sgl-project/sglang": ("sglang", "SGLang"), "vllm-project/vllm": ("vllm", "vLLM"),
                "ROCm/aiter": ("aiter", "aiter")}
ENGINES = ("sglang", "vllm")  # whose audit replays an entry's launch
MAX_ENTRY_BYTES = 64 * 1024  # an entry is a page of text; anything larger is not one
MAX_TEXT = 1200  # characters in one text field


#: The finding that stands for the audit's answer to a launch SGLang refuses at start-up (one line, exit 2).
REFUSAL_TITLE = "SGLang refuses this launch at start-up"


class BugEntryError(UsageError):
    """A corpus entry that is missing, malformed or inconsistent (the message names its file and field)."""


@dataclass(frozen=True)
class FindingClass:
    """A kind of failure: how the audit shows it (severity and the wording of its finding), or what it lacks."""

    name: str
    what: str
    severity: str | None = None  # None: the audit cannot raise this class yet
    markers: tuple[str, ...] = ()  # text of the finding's title or detail that marks the class
    lacks: str = ""


FINDING_CLASSES: dict[str, FindingClass] = {c.name: c for c in (
    FindingClass("untranslated-slots", "a sliding layer's SWA buffer is indexed with untranslated full-pool slot "
                 "ids", "wrong", ("untranslated full-pool slot ids",)),
    FindingClass("window-not-passed", "a sliding layer reaches a kernel that gets no window and attends the whole "
                 "context", "wrong", ("takes no window", "gets no window")),
    FindingClass("one-key-short", "a sliding layer attends W - 1 keys where the model means W", "one-short",
                 ("one key short",)),
    FindingClass("swa-pool-too-small", "the SWA pool is below the window plus a page: SGLang cannot admit a "
                 "request", "raises", ("the SWA pool is too small",)),
    FindingClass("mistranslated-slots", "an EAGLE draft that owns a full-only pool reads it through the target's "
                 "full->SWA mapping", "wrong", ("SWA-translated slot ids would index a full-size buffer",)),
    FindingClass("draft-pool-smaller", "the draft's full pool is smaller than the target's, so draft KV writes go "
                 "out of bounds", "wrong", ("the draft's full pool is smaller than the target's",)),
    FindingClass("draft-kv-outside-budget", "the draft's KV pool is allocated on top of a budget sized for the "
                 "target alone", "raises", ("the draft's KV pool is allocated outside the KV budget",)),
    FindingClass("swa-eviction", "out-of-window SWA slots are never freed, or freed twice, at run time",
                 "memory", ("out-of-window SWA slots are never freed",)),
    FindingClass("window-with-sinks", "attention sinks and a window together in one kernel give wrong output",
                 lacks="the audit models no attention sinks and does not plan the deterministic Triton path"),
    FindingClass("window-too-wide", "a model file passes W where SGLang's convention wants W - 1: one key too "
                 "many", "one-short", ("one key too many",)),
    FindingClass("ck-head-dim-cap", "aiter's CK prefill refuses head_dim over 256", "raises",
                 ("supports a head dimension of at most",)),
    FindingClass("startup-refusal", "SGLang refuses the launch at start-up (a model's backend allow-list)",
                 "raises", (REFUSAL_TITLE,)),
    FindingClass("tree-window-by-row", "an EAGLE tree's drafts get their window bound by flattened row, not "
                 "depth: a draft past a sibling's branch attends fewer keys than meant", "wrong", ("not its depth",)),
    FindingClass("backend-replaced", "SGLang runs another attention backend than the one the flags give, and "
                 "refuses nothing", "info", ("SGLang replaces the attention backend given",)),
    FindingClass("ck-window-dispatch", "aiter's batch prefill loads a masked module where its kernel computes "
                 "no mask, and fails", "raises", ("invalid argument for batch_prefill",)),
    FindingClass("verify-as-one-token", "a speculative verify step's query tokens reach a decode kernel told "
                 "max_seqlen_q=1, which attends them as one", "wrong",
                 ("draft tokens are attended as if they were one",)),
    FindingClass("local-sized-as-full", "with vLLM's hybrid KV-cache manager off, sliding (and chunked-local) "
                 "layers are sized for the whole context", "memory", ("pay for the whole context",)),
    FindingClass("shuffled-kv-window", "with aiter's shuffled KV layout, vLLM's ROCM_AITER_FA stops at an assertion "
                 "on a sliding-window, sinks or multi-token decode", "raises",
                 ("Shuffle KV cache layout is not supported",)),
    FindingClass("drafter-wrong-block-table", "a drafter layer's KV is written through another KV-cache group's "
                 "block table than its own", "wrong", (MISROUTED,)),
    FindingClass("admission-whole-sequence", "admission charges a drafter's sliding group for the whole prompt, "
                 "so a request the pool holds waits until it times out", "raises", (NEVER_ADMITTED,)),
)}


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
    def fix_text(self) -> str:
        """What the audit and the listing say of the fix: ``no fix known``, ``fixed in #N``, or the regression."""
        if self.fixed_by == "regressed":
            return f"fixed in #{self.number}, but SGLang {SGLANG_VERSION} no longer has that fix"
        return "no fix known" if self.fixed_by == "open" else f"fixed in #{self.fixed_by}"


# -- reading and checking ---------------------------------------------------------------------------------------

_KEYS = {"id", "repository", "number", "kind", "state", "title", "fixed_by", "confirmed_by", "launch", "symptom",
         "finding_class", "evidence", "audit_gap", "after_fix", "engine"}
_OPTIONAL = {"audit_gap", "after_fix", "engine"}
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
    model = raw["model"]
    if isinstance(model, str):
        _choice(raw, "model", where, list_models(), "launch.model")
    elif not isinstance(model, dict) or not model:
        raise _fail(where, "launch.model", "a bundled model name or a config.json's fields as an object")
    env = raw["env"]
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise _fail(where, "launch.env", "must map variable names to text values")
    texts = {k: _text(raw, k, where, f"launch.{k}", empty=k == "server_args")
             for k in ("server_args", "vllm_version", "platform")}
    draft = raw.get("draft_model")
    if draft is not None and (not isinstance(draft, dict) or not draft):
        raise _fail(where, "launch.draft_model", "the drafter's config.json fields as an object")
    spec = VllmLaunchSpec(model=model, env=env, note=_text(raw, "note", where, "launch.note") if "note" in raw
                          else "", draft_model=draft, **texts)
    try:
        check_launch(spec)  # the vLLM audit's own reading: a value it refuses is refused here, by name
    except LaunchFieldError as error:
        raise _fail(where, error.field, error.problem) from None
    return spec


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
                    audit_gap=gap, after_fix=after, engine=engine)


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


# -- the audit's findings as classes ----------------------------------------------------------------------------


def finding_classes(finding: Finding) -> frozenset[str]:
    """The classes one finding shows (a route finding may join several problems)."""
    text = f"{finding.title}\n{finding.detail}"
    return frozenset(c.name for c in FINDING_CLASSES.values()
                     if c.severity == finding.severity and any(m in text for m in c.markers))


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
             "finding_class": e.finding_class, "replays": "gap" if e.gap else "yes"} for e in corpus]
