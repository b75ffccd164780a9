"""Greedy speculative decoding over the kit's pools, and what each SWA-pool resolver does to it.

Everything runs through :class:`swa_kit.lessons.serving.Server`: the target and the draft read and write
the real pools, sliding layers read through full->SWA translated slots exactly when the resolver
under test says so, out-of-window eviction frees SWA slots after every step, and each layer's
route comes from :func:`swa_kit.engine.routing.plan`.

One verify round for a request with committed tokens ``x_0..x_n`` (target KV for ``0..n-1``;
``x_n`` is the last verified "bonus" token):

1. reserve slots for positions ``n..n+K`` (``K = num_draft``) in the shared allocator;
2. draft ``K`` tokens:
   * EAGLE: a draft extend over positions whose draft KV was written from drafted features
     (``draft_kv_len..n``) with the target's true features, then ``K - 1`` draft decode steps
     feeding the draft's own hidden state back (its KV goes to its own pool, at full ids);
   * FROZEN_KV MTP: ``K`` steps of the query-only head at rotary position ``n - 1`` over the
     target's KV of positions ``0..n-1``, feeding its recurrent state back (writes nothing);
3. target verify of ``[x_n, d_1..d_K]`` (a chain: topk 1), accept the longest prefix of drafts
   that equals the target's greedy choices, append the target's next choice (the bonus);
4. free the rejected positions' slots, evict out-of-window SWA slots.

So the output equals plain greedy decoding whatever the draft proposes, as long as the *target*
reads the right KV: a bad resolver can only cost acceptance (or crash on an out-of-bounds slot,
which the kit turns into :class:`~swa_kit.errors.SlotError`). A tree draft (topk > 1) needs tree
verify, which the aiter dispatch routes to SGLang's ``extend_attention_fwd``: no window argument,
so on this hybrid-SWA model the dispatch refuses it, and :func:`speculative_decode` raises that
refusal before drafting instead of bypassing it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from swa_kit.attention.batch import indptr
from swa_kit.errors import DispatchGuardError, SwaKitError, UsageError
from swa_kit.lessons import DEMO_NEW_TOKENS
from swa_kit.lessons.tiny_model import TinyModels
from swa_kit.lessons.serving import Request, Server

ALGORITHMS = ("eagle", "frozen_kv_mtp")
RESOLVER_NAMES = ("legacy", "naive", "fixed")
#: What the draft worker needs from the routing (:mod:`swa_kit.engine.routing`): the seed's paged-decode
#: guard refuses an EAGLE draft's sliding layer on ``paged_attention_ragged`` unless unified attention is on.
DEFAULT_ENV = {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}


@dataclass
class Round:
    """One verify round of one request."""

    request: int
    generated: int  # tokens generated before this round
    kv_len: int  # target KV length before this round
    drafted: int
    accepted: int


@dataclass
class Generation:
    """Output of a decoding run and how it went."""

    algorithm: str
    resolver: str
    outputs: list[list[int]]  # generated tokens per request (prompt excluded)
    rounds: list[Round] = field(default_factory=list)
    error: str | None = None
    guards: list[str] = field(default_factory=list)  # dispatch refusals seen (recorded when not enforced)
    computed_by: list[dict[str, str]] = field(default_factory=list)  # path, tier, device of every attention call
    seconds: float = 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens / drafted tokens (None with no round)."""
        drafted = sum(r.drafted for r in self.rounds)
        return sum(r.accepted for r in self.rounds) / drafted if drafted else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens committed per verify round (accepted drafts + the target's bonus), SGLang's accept length."""
        return sum(r.accepted + 1 for r in self.rounds) / len(self.rounds) if self.rounds else None


def agreement(outputs: list[list[int]], reference: list[list[int]]) -> float:
    """Fraction of the reference's generated tokens matched position by position (missing ones count wrong)."""
    total = sum(len(r) for r in reference)
    same = sum(sum(a == b for a, b in zip(o, r)) for o, r in zip(outputs, reference))
    return same / total if total else 1.0


def first_divergence(output: list[int], reference: list[int]) -> int | None:
    """The first generated position where ``output`` differs from ``reference`` (None if never)."""
    for i, (a, b) in enumerate(zip(output, reference)):
        if a != b:
            return i
    return None if len(output) >= len(reference) else len(output)


def _argmax(models: TinyModels, hidden: torch.Tensor) -> list[int]:
    return models.target.logits(hidden).argmax(-1).tolist()


def _prefill(server: Server, prompts: list[list[int]]) -> list[Request]:
    reqs = [server.add_request(p) for p in prompts]
    for r in reqs:
        server.reserve(r, 0, r.prompt_len)
    hidden = server.target_forward(reqs, [r.tokens for r in reqs], "prefill")
    offset = 0
    for r in reqs:
        h = hidden[offset:offset + r.prompt_len]
        offset += r.prompt_len
        r.hidden = list(h)
        r.kv_len = r.prompt_len
        r.tokens.append(_argmax(server.models, h[-1:])[0])
        server.evict(r)
    return reqs


def _close(result: Generation, server: Server, reqs: list[Request], max_new: int, start: float) -> Generation:
    """Fill in what a finished (or stopped) run produced, what it ran into and what computed it."""
    result.outputs = [r.generated[:max_new] for r in reqs]
    result.guards = list(server.guards_seen)
    result.computed_by = [dict(zip(("path", "tier", "device"), used)) for used in server.computed_by]
    result.seconds = time.perf_counter() - start
    return result


def greedy_decode(models: TinyModels, prompts: list[list[int]], max_new_tokens: int, *,
                  server: Server | None = None, progress: Callable[[int], Any] | None = None) -> Generation:
    """Plain greedy decoding (one token per target decode step) through the pools."""
    start = time.perf_counter()
    server = server or Server(models, "none", "fixed", max_requests=len(prompts),
                              max_context_len=max(map(len, prompts)) + max_new_tokens + 2)
    result = Generation("none", server.resolver, [])
    reqs: list[Request] = []
    try:
        reqs = _prefill(server, prompts)
        for _ in range(max_new_tokens - 1):
            for r in reqs:
                server.reserve(r, r.kv_len, 1)
            hidden = server.target_forward(reqs, [[r.tokens[-1]] for r in reqs], "decode")
            for r, h, tok in zip(reqs, hidden, _argmax(models, hidden)):
                r.hidden.append(h)
                r.kv_len += 1
                r.tokens.append(tok)
                server.evict(r)
            if progress:
                progress(1)
    except SwaKitError as error:
        result.error = f"{type(error).__name__}: {error}"
    return _close(result, server, reqs, max_new_tokens, start)


def _draft_eagle(server: Server, reqs: list[Request], k: int) -> list[list[int]]:
    models = server.models
    zeros = torch.zeros(1, models.cfg.d_model, dtype=torch.float64)
    starts = [r.draft_kv_len for r in reqs]
    tokens = [r.tokens[s:r.kv_len + 1] for r, s in zip(reqs, starts)]
    features = [torch.stack([r.hidden[p - 1] if p else zeros[0] for p in range(s, r.kv_len + 1)])
                for r, s in zip(reqs, starts)]
    mode = "draft_extend"
    drafts: list[list[int]] = [[] for _ in reqs]
    for step in range(k):
        hidden = server.eagle_forward(reqs, starts, tokens, features, mode)
        ends = indptr([len(t) for t in tokens], dtype=torch.int64)[1:] - 1  # each request's last token
        last = hidden[ends]
        for b, tok in enumerate(_argmax(models, last)):
            drafts[b].append(tok)
        starts = [r.kv_len + 1 + step for r in reqs]
        tokens = [[d[-1]] for d in drafts]
        features = [last[b:b + 1] for b in range(len(reqs))]
        mode = "draft_decode"
    for r in reqs:
        r.draft_kv_len = r.kv_len + 1
    return drafts


def _draft_mtp(server: Server, reqs: list[Request], k: int) -> list[list[int]]:
    state = torch.stack([r.hidden[r.kv_len - 1] for r in reqs])
    tokens = [r.tokens[-1] for r in reqs]
    drafts: list[list[int]] = [[] for _ in reqs]
    for _ in range(k):
        state = server.mtp_step(reqs, tokens, state)
        tokens = _argmax(server.models, state)
        for b, tok in enumerate(tokens):
            drafts[b].append(tok)
    return drafts


def speculative_decode(models: TinyModels, prompts: list[list[int]], max_new_tokens: int, algorithm: str,
                       resolver: str = "fixed", *, num_draft: int = 3, topk: int = 1,
                       env: dict[str, str] | None = None, enforce_guards: bool = False,
                       size_swa: int | None = None, progress: Callable[[int], Any] | None = None) -> Generation:
    """Greedy speculative decoding of ``prompts`` with an EAGLE or FROZEN_KV MTP draft.

    ``resolver`` picks the SWA-pool resolver every worker's backend uses. With ``enforce_guards``
    the dispatch's refusals raise; without (the default, as SGLang runs: it has no page-table
    guard) they are recorded in :attr:`Generation.guards` and the run shows their consequence.
    Errors the kit raises on the way (out-of-bounds slots, refusals) end the run and are reported
    in :attr:`Generation.error`; tokens generated until then are kept.
    """
    if algorithm not in ALGORITHMS:
        raise UsageError(f"unknown algorithm {algorithm!r}; one of {', '.join(ALGORITHMS)}")
    if num_draft < 1:
        raise UsageError(f"num_draft {num_draft!r}: draft at least one token per round")
    start = time.perf_counter()
    max_len = max(map(len, prompts)) + max_new_tokens + num_draft + 2
    server = Server(models, algorithm, resolver, max_requests=len(prompts), max_context_len=max_len, topk=topk,
                    env=DEFAULT_ENV if env is None else env, enforce_guards=enforce_guards, size_swa=size_swa)
    result = Generation(algorithm, resolver, [])
    verify_plan = server.plan("target", "verify")
    if verify_plan.error:
        # The dispatch refuses this verify route (tree verify takes no window): never bypass it.
        raise DispatchGuardError(f"{algorithm} topk={topk}: {verify_plan.error}")
    reqs: list[Request] = []
    try:
        reqs = _prefill(server, prompts)
        active = [r for r in reqs if len(r.generated) < max_new_tokens]
        while active:
            for r in active:
                server.reserve(r, r.kv_len, num_draft + 1)
            draft = _draft_eagle if algorithm == "eagle" else _draft_mtp
            drafts = draft(server, active, num_draft)
            hidden = server.target_forward(active, [[r.tokens[-1], *d] for r, d in zip(active, drafts)], "verify")
            offset = 0
            for r, d in zip(active, drafts):
                h = hidden[offset:offset + num_draft + 1]
                offset += num_draft + 1
                choice = _argmax(models, h)
                accepted = 0
                while accepted < num_draft and d[accepted] == choice[accepted]:
                    accepted += 1
                result.rounds.append(Round(reqs.index(r), len(r.generated), r.kv_len, num_draft, accepted))
                n = r.kv_len
                r.hidden.extend(h[:accepted + 1])
                r.tokens.extend(d[:accepted] + [choice[accepted]])
                r.kv_len = n + accepted + 1
                server.release(r, r.kv_len, n + num_draft + 1)
                r.draft_kv_len = min(r.draft_kv_len, r.kv_len)
                server.evict(r)
                if progress:
                    progress(accepted + 1)
            active = [r for r in active if len(r.generated) < max_new_tokens]
    except SwaKitError as error:
        result.error = f"{type(error).__name__}: {error}"
    return _close(result, server, reqs, max_new_tokens, start)


# -- the demo: algorithm x resolver, the guard experiment, the tree refusal -----------------------------------

#: Story openings shorter than the window, so the window fills while the model generates.
DEMO_PROMPTS = ("story 3. ", "story 41. tobi", "story 77. ", "story 120. mara the")


def resolver_rows(models: TinyModels, prompts: list[list[int]], max_new_tokens: int, plain: Generation,
                  progress: Callable[[int], Any] | None = None) -> tuple[list[dict[str, Any]], list[Generation]]:
    """One row per (algorithm, resolver): acceptance, accepted length, agreement with ``plain`` (None for a run
    that stopped), the tokens generated when it stopped (None for a run that finished), error."""
    rows, runs = [], []
    for algorithm in ALGORITHMS:
        for resolver in RESOLVER_NAMES:
            run = speculative_decode(models, prompts, max_new_tokens, algorithm, resolver, progress=progress)
            runs.append(run)
            rows.append({
                "algorithm": algorithm, "resolver": resolver,
                "acceptance_rate": _round(run.acceptance_rate),
                "mean_accepted_length": _round(run.mean_accepted_length),
                # a run that stopped on an error has no agreement to report: say where it stopped instead
                "agreement_with_plain": None if run.error else _round(agreement(run.outputs, plain.outputs)),
                "stopped_at": stopped_at(run, max_new_tokens), "error": run.error,
                "dispatch_guard": run.guards[0] if run.guards else None,
            })
    return rows, runs


def guard_experiment(models: TinyModels, prompts: list[list[int]], max_new_tokens: int, plain: Generation,
                     layer: int | None = None) -> dict[str, Any]:
    """Plain decoding with one sliding layer on ``paged_attention_ragged`` (no window), guard off and on."""
    cfg = models.cfg
    layer = cfg.sliding_layers[0] if layer is None else layer
    window = cfg.windows[layer] if layer in cfg.sliding_layers else None
    if window is None:
        raise UsageError(f"layer {layer!r}: the guard experiment reroutes a sliding layer, one of {cfg.sliding_layers}")
    max_len = max(map(len, prompts)) + max_new_tokens + 2
    unguarded = Server(models, "none", "fixed", max_requests=len(prompts), max_context_len=max_len,
                       enforce_guards=False, layer_sites={layer: "decode.paged"})
    run = greedy_decode(models, prompts, max_new_tokens, server=unguarded)
    guarded = Server(models, "none", "fixed", max_requests=len(prompts), max_context_len=max_len,
                     layer_sites={layer: "decode.paged"})
    refused = greedy_decode(models, prompts, max_new_tokens, server=guarded)
    entry = unguarded.route("target", "decode", layer)
    return {
        "layer": layer, "window": window, "path": entry.path, "tier": entry.tier,
        "computed_by": run.computed_by,
        "agreement_with_plain": _round(agreement(run.outputs, plain.outputs)),
        "window_fills_at": [max(0, window - len(p)) for p in prompts],
        "first_divergence": [first_divergence(o, r) for o, r in zip(run.outputs, plain.outputs)],
        "outputs": [cfg.decode(o) for o in run.outputs],
        "plain_outputs": [cfg.decode(o) for o in plain.outputs],
        "error_with_guard": refused.error,
        "stopped_at_with_guard": stopped_at(refused, max_new_tokens),
    }


def stopped_at(run: Generation, max_new_tokens: int) -> list[int] | None:
    """Tokens each request had generated when ``run`` stopped on an error; None for a run that finished.

    A stopped run has no agreement to report: the tokens it never produced are not a measurement.
    """
    if run.error is None:
        return None
    return [min(len(o), max_new_tokens) for o in run.outputs]


def _outcome(stopped: list[int] | None, error: str | None, max_new_tokens: int, same: float,
             firsts: list[int | None]) -> str:
    """A run's output against plain decoding, in words: stopped (no agreement to report), equal, or where it differs."""
    if stopped is not None:
        return f"stopped at token {', '.join(map(str, stopped))} of {max_new_tokens}: {(error or '').split(':')[0]}"
    if same == 1.0:
        return "equal to plain decoding"
    return (f"differs from plain decoding from token {', '.join(map(str, firsts))} on "
            f"({same:.0%} of tokens equal)")


def pr_before_after(models: TinyModels, prompts: list[list[int]], max_new_tokens: int, plain: Generation,
                    runs: dict[str, Generation] | None = None,
                    guard: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """SGLang PR #38756 on the same prompts, before and after each of its two fixes, side by side.

    Fix 1 (the resolver, a draft bug): a FROZEN_KV MTP draft under the legacy and the fixed resolver.
    Fix 2 (the guard; in the PR's case the draft's sliding layer reached the paged decode, here it is put on
    the target to show the output it costs): plain decoding with the target's first sliding layer routed to
    ``paged_attention_ragged`` (emulated: no window argument), guard off and on. Each row: the route
    of the affected layer, the slots it reads, the output against ``plain``, and the acceptance rate.
    ``runs`` may hold the FROZEN_KV MTP runs already made, keyed by resolver (``legacy``, ``fixed``), and
    ``guard`` the :func:`guard_experiment` report, so nothing is decoded twice.
    """
    runs = dict(runs or {})
    cfg, rows = models.cfg, []
    source = next(s for s in cfg.mtp_source_layers if cfg.layer_types[s] == "sliding")
    for resolver in ("legacy", "fixed"):
        run = runs.get(resolver) or speculative_decode(models, prompts, max_new_tokens, "frozen_kv_mtp", resolver)
        server = Server(models, "frozen_kv_mtp", resolver, max_requests=len(prompts), env=DEFAULT_ENV,
                        enforce_guards=False)
        entry = server.route("draft", "draft_decode", source)
        translated = server.swa_kv_pool("draft", True) is not None
        rows.append({
            "fix": "1 resolver (draft)", "state": f"{'before' if resolver == 'legacy' else 'after'}: {resolver}",
            "layer": f"draft reads target layer {source}", "route": f"{entry.site} -> {entry.path} [{entry.tier}]",
            "slots read": ("SWA slots (ids translated)" if translated else
                           "full-pool ids, untranslated, into the target's SWA buffer"),
            "output": _outcome(stopped_at(run, max_new_tokens), run.error, max_new_tokens,
                               agreement(run.outputs, plain.outputs),
                               [first_divergence(o, r) for o, r in zip(run.outputs, plain.outputs)]),
            "acceptance_rate": _round(run.acceptance_rate),
        })
    guard = guard or guard_experiment(models, prompts, max_new_tokens, plain)
    for enforce in (False, True):
        server = Server(models, "none", "fixed", max_requests=len(prompts), enforce_guards=enforce,
                        layer_sites={guard["layer"]: "decode.paged"})
        entry = server.route("target", "decode", guard["layer"])
        rows.append({
            "fix": "2 guard (target)", "state": "after: guard on" if enforce else "before: guard off",
            "layer": f"target layer {guard['layer']}", "route": f"{entry.site} -> {entry.path} [{entry.tier}]",
            "slots read": ("none: refused before the kernel runs" if enforce else
                           "every key of the context (no window argument)"),
            "output": (_outcome(guard["stopped_at_with_guard"], guard["error_with_guard"], max_new_tokens, 0.0, [])
                       if enforce else _outcome(None, None, max_new_tokens, guard["agreement_with_plain"],
                                                guard["first_divergence"])),
            "acceptance_rate": None,
        })
    return rows


def one_key_short_experiment(models: TinyModels, prompts: list[list[int]], max_new_tokens: int,
                             plain: Generation) -> dict[str, Any]:
    """Plain decoding where every sliding layer attends what SGLang's argument makes its kernel attend.

    ``plain`` attends the layers' intended windows (as the model was trained); here each
    window-honouring route attends the plan's ``effective_keys`` instead: W - 1 keys at SGLang's
    unified call sites, which pass ``(sliding_window_size - 1, 0)`` to aiter (measured by
    ``swa-kit probe --sglang-sites``).
    """
    max_len = max(map(len, prompts)) + max_new_tokens + 2
    server = Server(models, "none", "fixed", max_requests=len(prompts), max_context_len=max_len,
                    sglang_windows=True)
    run = greedy_decode(models, prompts, max_new_tokens, server=server)
    attended = {f"{mode} layer {e.layer}": {"site": e.site, "intended_keys": e.intended_keys,
                                             "effective_keys": e.effective_keys}
                for mode in ("prefill", "decode") for e in server.plan("target", mode).layers if e.kind == "sliding"}
    return {
        "attended": attended,
        "agreement_with_plain": _round(agreement(run.outputs, plain.outputs)),
        "first_divergence": [first_divergence(o, r) for o, r in zip(run.outputs, plain.outputs)],
        "error": run.error,
        "computed_by": run.computed_by,
    }


def tree_refusal(models: TinyModels, prompts: list[list[int]], topk: int = 2) -> str | None:
    """The dispatch's answer to an EAGLE tree draft (topk > 1) on this hybrid-SWA model (None if allowed)."""
    try:
        speculative_decode(models, prompts, 4, "eagle", "fixed", topk=topk)
    except DispatchGuardError as error:
        return f"{type(error).__name__}: {error}"
    return None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def run_demo(models: TinyModels, prompts: tuple[str, ...] = DEMO_PROMPTS, max_new_tokens: int = DEMO_NEW_TOKENS,
             progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Everything ``swa-kit spec-demo`` reports, as one JSON-ready dict (``seconds`` included)."""
    start = time.perf_counter()
    ids = [models.cfg.encode(p) for p in prompts]
    plain = greedy_decode(models, ids, max_new_tokens, progress=progress)
    if plain.error:
        raise DispatchGuardError(f"plain greedy decoding failed, nothing to compare with: {plain.error}")
    rows, _ = resolver_rows(models, ids, max_new_tokens, plain, progress=progress)
    return {
        "rows": rows,
        "guard_experiment": guard_experiment(models, ids, max_new_tokens, plain),
        "one_key_short": one_key_short_experiment(models, ids, max_new_tokens, plain),
        "tree_verify": {"algorithm": "eagle", "topk": 2, "error": tree_refusal(models, ids)},
        "prompts": list(prompts), "max_new_tokens": max_new_tokens, "window": models.cfg.max_window,
        "seconds": round(time.perf_counter() - start, 2),
    }
