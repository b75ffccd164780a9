"""Pictures of the KV pools: occupancy over a run, the full->SWA mapping, and which slots a layer reads.

Every function takes the kit's own objects (snapshots from :func:`swa_kit.engine.workers.run_decode`,
workers from :func:`swa_kit.engine.workers.build_workers`) and returns a matplotlib ``Figure`` built without
pyplot, so it renders headless and leaves no global state.
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from swa_kit.errors import ModelConfigError
from swa_kit.engine.resolver import RESOLVERS, slots_read
from swa_kit.engine.workers import DUMMY, FREE, PoolSnapshot, Workers

# image codes: 0 free, 1 dummy slot 0, 2 live for the request shown, 3 live for another request
STATE_COLORS = ["#f2f2f2", "#404040", "#2b8cbe", "#a6bddb"]
STATE_NAMES = ["free", "dummy (slot 0)", "live", "other request"]
RIGHT, WRONG, OUT = "#1a9850", "#d73027", "#7b3294"


def _codes(owner: np.ndarray, req: int) -> np.ndarray:
    codes = np.full(owner.shape, 3)
    codes[owner == FREE] = 0
    codes[owner == DUMMY] = 1
    codes[owner == req] = 2
    return codes


def occupancy_images(snapshots: list[PoolSnapshot], req: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """Slot-state codes per step (rows) and slot (columns) for the full and the SWA pool."""
    full = np.stack([_codes(s.full_owner.numpy(), req) for s in snapshots])
    swa = [s.swa_owner.numpy() for s in snapshots if s.swa_owner is not None]
    if len(swa) < len(snapshots):  # one pool: no SWA slots to draw
        return full, None
    return full, np.stack([_codes(owner, req) for owner in swa])


class OccupancyPlot:
    """Full and SWA slots of one request over a run, and the counts per step, redrawn in place.

    Built once for a whole run; :meth:`show` reveals the steps up to one step (later rows blank, the
    count lines cut there) by updating the images' data and the lines' data, never building a figure.
    """

    def __init__(self, snapshots: list[PoolSnapshot], req: int = 0) -> None:
        self.req = req
        self.full, self.swa = occupancy_images(snapshots, req)
        self.steps = np.array([s.step for s in snapshots])
        counts = [s.counts(req) for s in snapshots]
        panels = 3 if self.swa is not None else 2
        self.fig = Figure(figsize=(4.2 * panels, 3.6), layout="constrained")
        axes = self.fig.subplots(1, panels)
        cmap = ListedColormap(STATE_COLORS)
        self.images = []
        for ax, image, title in zip(axes, (self.full, self.swa), ("full pool slots", "SWA pool slots")):
            if image is None:
                continue
            self.images.append(ax.imshow(image, cmap=cmap, vmin=0, vmax=3, aspect="auto", interpolation="nearest",
                                         extent=(-0.5, image.shape[1] - 0.5, self.steps[-1] + 0.5,
                                                 self.steps[0] - 0.5)))
            ax.set(title=title, xlabel="slot id", ylabel="decode step")
        ax = axes[-1]
        self.counts = {key: np.array([c[key] for c in counts]) for key in ("full_live", "swa_live", "swa_freed")}
        self.lines = {key: ax.plot(self.steps, values, marker="o", ms=3, color=color,
                                   label=key.replace("_", " "))[0]
                      for (key, values), color in zip(self.counts.items(), (STATE_COLORS[2], RIGHT, "#999999"))}
        ax.set(title=f"request {req}: slots held", xlabel="decode step", ylabel="slots")
        ax.legend(fontsize=8)
        handles = [Rectangle((0, 0), 1, 1, color=c) for c in STATE_COLORS]
        self.fig.legend(handles, STATE_NAMES, loc="outside lower center", ncols=4, fontsize=8)

    def changing_artists(self) -> list:
        """What :meth:`show` changes, in drawing order: the axes' frames and the legend go on top again."""
        frames = [spine for ax in self.fig.axes for spine in ax.spines.values()]
        return [*self.images, *self.lines.values(), *frames, self.fig.axes[-1].get_legend()]

    def show(self, step: int) -> Figure:
        """Reveal the run up to decode step ``step`` (rows and points after it hidden)."""
        hidden = self.steps > step
        for im, data in zip(self.images, [d for d in (self.full, self.swa) if d is not None]):
            im.set_data(np.ma.masked_array(data, np.broadcast_to(hidden[:, None], data.shape)))
        for key, line in self.lines.items():
            line.set_data(self.steps[~hidden], self.counts[key][~hidden])
        return self.fig


def plot_pool_occupancy(snapshots: list[PoolSnapshot], req: int = 0) -> Figure:
    """Full and SWA slots of one request over a run: live, free, dummy; and the counts per step."""
    return OccupancyPlot(snapshots, req).fig


class MappingPlot:
    """Each token's full slot (top) joined to its SWA slot (bottom), redrawn in place per snapshot."""

    def __init__(self, slots: int) -> None:
        self.fig = Figure(figsize=(9, 3.2), layout="constrained")
        self.ax = self.fig.subplots()
        self.full = self.ax.scatter([], [], color=STATE_COLORS[2], zorder=3, s=25, label="full slot")
        self.swa = self.ax.scatter([], [], zorder=3, s=25, label="SWA slot (0 = dummy)")
        self.links: list = []
        self.ax.set_yticks([0, 1], ["SWA pool", "full pool"])
        self.ax.set_xlabel("slot id")
        self.ax.set_xlim(-1, slots)
        self.ax.set_ylim(-0.4, 1.4)
        self.title = self.ax.set_title("")

    def changing_artists(self) -> list:
        """What :meth:`show` changes, in drawing order (the links under the slot markers)."""
        return [*self.links, self.full, self.swa, self.title]

    def show(self, snapshot: PoolSnapshot, req: int = 0) -> Figure:
        """Draw ``snapshot``'s mapping for request ``req``; evicted tokens point at dummy slot 0."""
        if not snapshot.swa_ids:
            raise ModelConfigError("this snapshot has no SWA pool (a one-pool model): there is no full->SWA "
                                   "mapping to draw; build the workers with a hybrid_swa layout")
        full_ids = snapshot.full_ids[req].numpy()
        swa_ids = snapshot.swa_ids[req].numpy()
        live = swa_ids > 0
        for line in self.links:
            line.remove()
        self.links = [self.ax.plot([f, s], [1, 0], color=RIGHT if ok else "#999999", ls="-" if ok else "--",
                                   lw=1.2, gid="live" if ok else "evicted")[0]
                      for f, s, ok in zip(full_ids, swa_ids, live)]
        self.full.set_offsets(np.column_stack([full_ids, np.ones_like(full_ids)]))
        self.swa.set_offsets(np.column_stack([swa_ids, np.zeros_like(swa_ids)]))
        self.swa.set_facecolor([RIGHT if ok else STATE_COLORS[1] for ok in live])
        self.title.set_text(f"request {req}, step {snapshot.step}: full -> SWA mapping "
                            f"({int(live.sum())} live, {int((~live).sum())} evicted -> slot 0; a -1 id maps to -1)")
        return self.fig


def plot_mapping(snapshot: PoolSnapshot, req: int = 0) -> Figure:
    """Each token's full slot (top) joined to its SWA slot (bottom); evicted tokens point at dummy slot 0."""
    return MappingPlot(len(snapshot.full_owner)).show(snapshot, req)


def plot_slots_read(workers: Workers, role: str, layer_id: int, req: int, seq_len: int) -> Figure:
    """For each resolver: the buffer rows one layer reads for the request's attended tokens.

    Green: the right row. Red: a wrong row, silently. Purple, past the buffer's end: out of bounds.
    """
    reads = [slots_read(workers, role, name, layer_id, req, seq_len) for name in RESOLVERS]
    rows = reads[0].buffer_rows
    top = max([rows] + [int(r.read_ids.max()) + 1 for r in reads])
    fig = Figure(figsize=(9, 1.0 + 0.7 * len(reads)), layout="constrained")
    ax = fig.subplots()
    ax.axvspan(rows - 0.5, max(top, rows) + 8, color=OUT, alpha=0.12, gid="out_of_bounds")
    for y, read in enumerate(reads):
        ids = read.read_ids[read.attended].numpy()
        right = read.right_ids[read.attended].numpy()
        colors = np.where(ids >= rows, OUT, np.where(ids == right, RIGHT, WRONG))
        ax.scatter(ids, np.full_like(ids, y), c=list(colors), s=60, marker="s", gid=read.resolver)
        verdict = "ok" if read.ok else ("out of bounds" if (ids >= rows).any() else "wrong slots")
        ax.text(max(top, rows) + 1, y, verdict, va="center", fontsize=9)
    ax.set_yticks(range(len(reads)), [f"{r.resolver}{' (translated)' if r.translated else ''}" for r in reads])
    ax.set_xlim(-0.5, max(top, rows) + 8)
    ax.set_ylim(-0.6, len(reads) - 0.4)
    ax.set_xlabel(f"row of {reads[0].pool} buffer for layer {reads[0].source_layer} ({rows} rows; shaded = "
                  "out of bounds)")
    ax.set_title(f"{role} layer {layer_id} ({'sliding' if reads[0].sliding else 'full'}), request {req}: "
                 "slots read per resolver")
    return fig
