"""How fast the kit's widgets answer: what one redraw costs, and how far a fast drag lags, per widget.

    /work/venv/bin/python benchmarks/widgets.py [--repeat 2] [--drags 20] [--interval-ms 16]
                                                [--delivery throttled|raw] [--json]

Moves (in this process): each widget is built as a notebook builds it, then each of its controls is moved over its
range by setting the control's value, which fires the observer a browser fires; without an event loop the widget
redraws at once, so a move's time is one whole redraw, rendered and encoded as the Image widget shows it. Two
clocks: wall time, and this process's CPU time, which a busy shared machine inflates less. Each pass builds the widget
anew: the decode stepper keeps each step's pictures, so its moves go forward only, each one a first visit.

Drags (in a real kernel): each widget is built in an ipykernel, and this process plays the browser. A drag sends a
slider's values one after another, one every ``--interval-ms`` (16 ms: a value per frame at 60 Hz), as the
comm messages ipywidgets sends. ``throttled`` delivery is ipywidgets 8's own: one message in flight per control,
later values merged and sent when the kernel reports the earlier one handled; ``raw`` sends every value. A drag's
lag is from the moment its last value is given to the moment the picture drawn for it arrives back (the browser's
paint not included); its redraws are the pictures the kernel sent during the drag. Drags are random (seeded)
stretches of each slider's range (a stepper drag back over steps shown before only shows their pictures again);
the first drag warms the kernel up and is printed apart. The load average is printed too, so that a slow run can
be read.

Targets on a 2-core CPU machine: a move's wall p50 <= 100 ms; a drag's lag p95 <= 120 ms for every widget. With a
redraw of r ms, a drag's last value usually lands during a redraw of an older one, so its lag runs up to about 2r.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
TARGET_MOVE_P50_MS = 100.0
TARGET_DRAG_P95_MS = 120.0
SETTLE_TIMEOUT_S = 10.0  # a drag whose last picture has not come back by then is an error, not a number


def _moves_of_mask_explorer() -> tuple[Any, list[tuple[Any, Any]]]:
    from swa_kit.widgets.masks import mask_explorer

    box = mask_explorer(mode="extend", window=4, q_len=64, kv_len=96)  # the 64 x 96 mask
    (mode, _), (window, chunk), (q_len, kv_len) = (row.children for row in box.children[:3])
    moves = [(window, v) for v in range(1, 65, 3)]
    moves += [(kv_len, v) for v in range(96, 63, -4)] + [(q_len, v) for v in range(64, 31, -4)]
    moves += [(mode, m) for m in ("prefill", "decode", "verify", "tree", "chunked", "extend")]
    moves += [(chunk, v) for v in (2, 8, 16)]
    return box, moves


def _moves_of_decode_stepper() -> tuple[Any, list[tuple[Any, Any]]]:
    from swa_kit.widgets.pools import decode_stepper

    box = decode_stepper()
    slider = box.children[0]
    return box, [(slider, v) for v in range(slider.min + 1, slider.max + 1)]  # each step new: drawn, not reused


@dataclass(frozen=True)
class DragSpec:
    """How to build one widget in the kernel, which sliders a drag moves (and over what range), and the summary
    the widget shows for given control values (to know the drag's last picture when it arrives)."""

    build: str  # kernel code: binds ``box``, and ``ids`` (control name -> model id, plus "text" and "picture")
    start: dict[str, Any]
    ranges: dict[str, tuple[int, int]]
    summary: Callable[[dict[str, Any]], str]


def _mask_summary(c: dict[str, Any]) -> str:
    from swa_kit.widgets.masks import explore

    return explore(c["mode"], c["window"], c["q_len"], c["kv_len"], c["chunk"])[1]


def _stepper_summary(c: dict[str, Any]) -> str:
    from swa_kit.widgets.pools import decode_step_state

    return decode_step_state(c["decode step"])["text"]


WIDGETS: dict[str, tuple[Callable[[], tuple[Any, list[tuple[Any, Any]]]], DragSpec]] = {
    "mask_explorer (64 x 96 mask)": (_moves_of_mask_explorer, DragSpec(
        build="from swa_kit.widgets.masks import mask_explorer\n"
              "box = mask_explorer(mode='extend', window=4, q_len=64, kv_len=96)\n"
              "(_, _), (window, _), (q_len, kv_len) = (row.children for row in box.children[:3])\n"
              "ids = {'window': window.model_id, 'q_len': q_len.model_id, 'kv_len': kv_len.model_id,\n"
              "       'text': box.children[3].children[0].model_id, 'picture': box.children[3].children[-1].model_id}",
        start={"mode": "extend", "window": 4, "q_len": 64, "kv_len": 96, "chunk": 4},
        ranges={"window": (1, 64), "q_len": (16, 64), "kv_len": (64, 96)},  # every value a valid, different mask
        summary=_mask_summary)),
    "decode_stepper": (_moves_of_decode_stepper, DragSpec(
        build="from swa_kit.widgets.pools import decode_stepper\n"
              "box = decode_stepper()\n"
              "ids = {'decode step': box.children[0].model_id, 'text': box.children[1].children[0].model_id,\n"
              "       'picture': box.children[1].children[-1].model_id}",
        start={"decode step": 0},
        ranges={"decode step": (0, 12)},
        summary=_stepper_summary)),
}


def time_moves(build: Callable[[], tuple[Any, list[tuple[Any, Any]]]], repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds of each move (``control.value = v``), ``repeat`` passes, each on a new widget."""
    wall, cpu = [], []
    for _ in range(repeat):
        _, moves = build()
        for control, value in moves:
            if control.value == value:
                continue
            w0, c0 = time.perf_counter(), time.process_time()
            control.value = value
            wall.append(1e3 * (time.perf_counter() - w0))
            cpu.append(1e3 * (time.process_time() - c0))
    return wall, cpu


def random_drags(spec: DragSpec, n: int, rng: random.Random) -> list[tuple[str, list[int]]]:
    """``n`` drags, each a run of consecutive values (at least 3) from a slider's current value to a random one."""
    at = {name: spec.start[name] for name in spec.ranges}
    drags = []
    while len(drags) < n:
        name = rng.choice(sorted(spec.ranges))
        lo, hi = spec.ranges[name]
        target = rng.randint(lo, hi)
        if abs(target - at[name]) < 3:
            continue
        step = 1 if target > at[name] else -1
        drags.append((name, list(range(at[name] + step, target + step, step))))
        at[name] = target
    return drags


@dataclass
class Browser:
    """The browser's side of the comm: sends control values, reads the kernel's pictures back (iopub)."""

    client: Any
    ids: dict[str, str]
    throttled: bool
    in_flight: dict[str, str] = field(default_factory=dict)  # control -> msg id not yet reported idle
    buffered: dict[str, int] = field(default_factory=dict)  # control -> newest value waiting for that idle
    texts: list[tuple[float, str]] = field(default_factory=list)  # (arrival, summary shown)
    pictures: list[float] = field(default_factory=list)  # arrival of each picture the kernel sent
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set on each picture

    def give(self, control: str, value: int) -> None:
        """The user moved ``control`` to ``value``: send it, or (throttled, one in flight) keep it for later."""
        if self.throttled and control in self.in_flight:
            self.buffered[control] = value
            return
        state = {"method": "update", "state": {"value": value}, "buffer_paths": []}
        msg = self.client.session.msg("comm_msg", {"comm_id": self.ids[control], "data": state})
        self.client.shell_channel.send(msg)
        self.in_flight[control] = msg["header"]["msg_id"]

    async def read(self) -> None:
        """Forever: record pictures and summaries; on a message's idle, send the value buffered behind it."""
        by_id = {model: name for name, model in self.ids.items()}
        while True:
            msg = await self.client.get_iopub_msg()
            now = time.perf_counter()
            content = msg["content"]
            if msg["msg_type"] == "status" and content["execution_state"] == "idle":
                parent = msg["parent_header"].get("msg_id")
                for control, msg_id in list(self.in_flight.items()):
                    if msg_id == parent:
                        del self.in_flight[control]
                        if control in self.buffered:
                            self.give(control, self.buffered.pop(control))
            elif msg["msg_type"] == "comm_msg" and content["data"].get("method") == "update":
                data, role = content["data"], by_id.get(content["comm_id"])
                if role == "text" and "value" in data["state"]:
                    self.texts.append((now, html.unescape(data["state"]["value"])))
                elif role == "picture" and ["value"] in data.get("buffer_paths", []):
                    self.pictures.append(now)
                    self.arrived.set()


async def _run_code(client: Any, code: str) -> str:
    """Run ``code`` in the kernel; its printed output, or the kernel's error as an exception."""
    printed: list[str] = []

    def keep(msg: dict) -> None:
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])

    reply = await client.execute_interactive(code, output_hook=keep, timeout=120)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"the kernel failed to run {code.splitlines()[0]!r}: {reply['content'].get('evalue')}")
    return "".join(printed)


async def time_drags(spec: DragSpec, drags: list[tuple[str, list[int]]], interval_s: float,
                     throttled: bool) -> tuple[list[float], list[int], float]:
    """Each drag's lag (ms) and redraw count after the first, and the first drag's lag, in a fresh kernel."""
    from jupyter_client.manager import AsyncKernelManager

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "MPLBACKEND": "Agg"}
    manager = AsyncKernelManager(kernel_name="python3")
    await manager.start_kernel(env=env)
    client = manager.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=120)
        ids = json.loads(await _run_code(client, spec.build + "\nimport json; print(json.dumps(ids))"))
        browser = Browser(client, ids, throttled)
        reader = asyncio.create_task(browser.read())
        values = dict(spec.start)
        lags, redraws = [], []
        for control, path in drags:  # the first is a warm-up (the kernel's first redraws take seconds): not counted
            pictures_before = len(browser.pictures)
            texts_before = len(browser.texts)
            t0 = time.perf_counter()
            for i, value in enumerate(path):
                await asyncio.sleep(max(0.0, t0 + i * interval_s - time.perf_counter()))
                browser.give(control, value)
            last_given = time.perf_counter()
            values[control] = path[-1]
            want = spec.summary(values)
            lags.append(1e3 * (await _settled(browser, want, texts_before) - last_given))
            redraws.append(len(browser.pictures) - pictures_before)
        reader.cancel()
        return lags[1:], redraws[1:], lags[0]
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)


async def _settled(browser: Browser, want: str, texts_before: int) -> float:
    """When the picture drawn for the drag's last values arrived (the one after the summary saying ``want``)."""
    deadline = time.perf_counter() + SETTLE_TIMEOUT_S
    while True:
        shown = [t for t, text in browser.texts[texts_before:] if want in text]
        after = [t for t in browser.pictures if shown and t >= shown[-1]]
        if after:
            return after[0]
        browser.arrived.clear()
        try:
            await asyncio.wait_for(browser.arrived.wait(), max(0.0, deadline - time.perf_counter()))
        except TimeoutError:
            last = browser.texts[-1][1] if browser.texts else "nothing"
            raise RuntimeError(f"the widget never showed its last values within {SETTLE_TIMEOUT_S:.0f} s "
                               f"(it shows {last[:80]!r}): it fell behind or dropped them") from None


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100), interpolated (statistics.quantiles' inclusive method)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


def _load() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="passes over each widget's moves (default 2)")
    parser.add_argument("--drags", type=int, default=20, help="drags per widget, in a kernel (default 20; 0: none)")
    parser.add_argument("--interval-ms", type=float, default=16.0, help="between a drag's values (default 16)")
    parser.add_argument("--delivery", choices=("throttled", "raw"), default="throttled",
                        help="throttled: as ipywidgets 8's frontend sends (default); raw: every value at once")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random drags (default 0)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: give at least 1 pass")
    if args.drags < 0 or args.interval_ms <= 0:
        parser.error(f"--drags {args.drags} --interval-ms {args.interval_ms}: give drags >= 0 and an interval > 0")
    sys.path.insert(0, str(ROOT))
    moves, drags = [], []
    load_before = _load()
    for name, (build_moves, spec) in WIDGETS.items():
        wall, cpu = time_moves(build_moves, args.repeat)
        moves.append({"widget": name, "moves": len(wall),
                      "wall_p50_ms": round(percentile(wall, 50), 1), "wall_p95_ms": round(percentile(wall, 95), 1),
                      "cpu_p50_ms": round(percentile(cpu, 50), 1), "cpu_p95_ms": round(percentile(cpu, 95), 1)})
        if args.drags:
            paths = random_drags(spec, args.drags + 1, random.Random(args.seed))
            lags, redraws, first = asyncio.run(
                time_drags(spec, paths, args.interval_ms / 1e3, args.delivery == "throttled"))
            drags.append({"widget": name, "drags": len(lags),
                "values_per_drag": round(statistics.mean(len(p) for _, p in paths[1:]), 1),
                "redraws_per_drag": round(statistics.mean(redraws), 1),
                "lag_p50_ms": round(percentile(lags, 50), 1), "lag_p95_ms": round(percentile(lags, 95), 1),
                "lag_max_ms": round(max(lags), 1), "first_drag_lag_ms": round(first, 1)})
    loads = (load_before, _load())
    if args.json:
        print(json.dumps({"cpus": os.cpu_count(), "load_1min": loads, "target_move_p50_ms": TARGET_MOVE_P50_MS,
                          "target_drag_p95_ms": TARGET_DRAG_P95_MS, "interval_ms": args.interval_ms,
                          "delivery": args.delivery, "moves": moves, "drags": drags}, indent=2))
        return 0
    load_text = f"load average {loads[0]:.1f} -> {loads[1]:.1f} (1 min)" if None not in loads else "load unknown"
    print(f"{os.cpu_count()} CPUs, {load_text}")
    print(f"moves (one redraw each; target wall p50 <= {TARGET_MOVE_P50_MS:.0f} ms)")
    for r in moves:
        verdict = "ok" if r["wall_p50_ms"] <= TARGET_MOVE_P50_MS else "SLOW"
        print(f"  {r['widget']:30} {r['moves']:3d} moves  wall p50 {r['wall_p50_ms']:7.1f} ms  "
              f"p95 {r['wall_p95_ms']:7.1f} ms   cpu p50 {r['cpu_p50_ms']:7.1f} ms  p95 {r['cpu_p95_ms']:7.1f} ms"
              f"  {verdict}")
    if drags:
        print(f"drags in a kernel ({args.delivery} delivery, a value every {args.interval_ms:g} ms; "
              f"target lag p95 <= {TARGET_DRAG_P95_MS:.0f} ms)")
    for r in drags:
        verdict = "ok" if r["lag_p95_ms"] <= TARGET_DRAG_P95_MS else "SLOW"
        print(f"  {r['widget']:30} {r['drags']:3d} drags of {r['values_per_drag']:4.1f} values, "
              f"{r['redraws_per_drag']:4.1f} redraws each  lag p50 {r['lag_p50_ms']:7.1f} ms  "
              f"p95 {r['lag_p95_ms']:7.1f} ms  max {r['lag_max_ms']:7.1f} ms  {verdict}  "
              f"(warm-up drag: {r['first_drag_lag_ms']:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
