"""The teaching kernel in Triton's CPU interpreter against the float64 reference, and a window bound off by one caught.

As in tests/test_kit_triton.py, one child process started with ``TRITON_INTERPRET=1`` runs every case: the parent
draws fresh random batches (every slot no query attends poisoned with NaN), the child runs the kernel on each, and
the parent compares with the reference. The child also runs mutants of the kernel whose window bound is off by one
key either way: each must fail at least one case, or these cases could not tell a right kernel from a wrong one.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from swa_kit.attention.batch import poison_unattended, random_paged_batch
from swa_kit.attention.kit import teaching
from swa_kit.attention.reference import reference_attention
from swa_kit.errors import PathUnavailableError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")

BOUND = "first = tl.maximum(seq_len - window, 0)"  # the window's first key, as the kernel writes it
MUTANTS = {"one key short": BOUND.replace("window, 0", "window + 1, 0"),
           "one key too many": BOUND.replace("window, 0", "window - 1, 0")}
TOLERANCE = 2e-3


def _cases(gen: torch.Generator) -> list[tuple]:
    """(batch, keys): no window, one key, a few keys, a window wider than every request; page sizes 1 and 16; MHA,
    GQA 3 (a padded group) and GQA 4; a one-token request among longer ones."""
    small = int(torch.randint(2, 9, (1,), generator=gen))
    cases = []
    for page, (hq, hkv), keys in ((1, (4, 1), small), (16, (6, 2), small), (1, (2, 2), None), (16, (4, 1), None),
                                  (1, (6, 2), 1), (16, (2, 2), 1), (1, (4, 1), 300), (16, (6, 2), 300),
                                  (16, (4, 1), 17)):
        seq_lens = [int(n) for n in torch.randint(2, 60, (3,), generator=gen)] + [1]
        batch = random_paged_batch([1] * len(seq_lens), seq_lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=16,
                                   page_size=page, spare_pages=0, dtype=torch.float16, generator=gen)
        poison_unattended(batch, keys)
        cases.append((batch, keys))
    return cases


def _load_mutant(name: str, source: str) -> object:
    """The teaching module with its window bound replaced, from a file of its own (Triton reads a kernel's source)."""
    text = Path(teaching.__file__).read_text()
    assert text.count(BOUND) == 1, "the kernel's window bound changed: update BOUND"
    path = Path(tempfile.mkdtemp()) / f"teaching_{name.replace(' ', '_')}.py"
    path.write_text(text.replace(BOUND, source))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _worker(path: str) -> None:
    """Child process: the kernel and each mutant on every saved case (a failed run becomes its error text)."""
    from swa_kit.attention.kit.interpreted import interpreter_active

    assert interpreter_active(), "the child must be started with TRITON_INTERPRET=1"
    cases = torch.load(path, weights_only=False)  # our own file: AttentionBatch objects
    modules = {"kernel": teaching, **{name: _load_mutant(name, source) for name, source in MUTANTS.items()}}
    outputs = {}
    for name, module in modules.items():
        outputs[name] = []
        for batch, keys in cases:
            try:
                outputs[name].append(module.window_decode(batch, keys))
            except Exception as error:  # a mutant may fail outright; that is a failure the parent sees
                outputs[name].append(f"{type(error).__name__}: {error}")
    torch.save({"outputs": outputs, "kernel_file": teaching.__file__}, path + ".out")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[tuple], dict]:
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    cases = _cases(gen)
    path = str(tmp_path_factory.mktemp("kit_teaching") / "cases.pt")
    torch.save(cases, path)
    import swa_kit

    checkout = str(Path(swa_kit.__file__).resolve().parents[1])  # the child imports the kit this process imported
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))}
    child = subprocess.run([sys.executable, __file__, path], env=env, capture_output=True, text=True, timeout=600,
                           check=False)
    assert child.returncode == 0, child.stderr[-3000:]
    result = torch.load(path + ".out", weights_only=False)
    assert Path(result["kernel_file"]).resolve() == Path(teaching.__file__).resolve(), "the child ran another kit"
    return cases, result["outputs"]


def _error(out: torch.Tensor | str, batch, keys) -> float:
    """Relative error against the float64 reference; infinite for a failed run or any NaN."""
    if isinstance(out, str) or torch.isnan(out).any():
        return float("inf")
    ref = reference_attention(batch, keys).out
    return float((out.double() - ref).norm() / ref.norm())


def test_the_teaching_kernel_matches_the_reference(runs) -> None:
    cases, outputs = runs
    errors = [_error(out, batch, keys) for out, (batch, keys) in zip(outputs["kernel"], cases, strict=True)]
    assert all(e < TOLERANCE for e in errors), [(keys, batch.page_size, e) for e, (batch, keys) in zip(errors, cases)]


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_window_bound_off_by_one_fails(runs, mutant: str) -> None:
    cases, outputs = runs
    errors = [_error(out, batch, keys) for out, (batch, keys) in zip(outputs[mutant], cases, strict=True)]
    assert max(errors) > 10 * TOLERANCE, f"the mutant '{mutant}' passed every case: the cases cannot see the bound"


def _batch(q_lens=(1, 1), head_dim=16, dtype=torch.float16, page_size=1):
    return random_paged_batch(list(q_lens), [20, 9], num_q_heads=4, num_kv_heads=2, head_dim=head_dim, dtype=dtype,
                              page_size=page_size, generator=torch.Generator().manual_seed(1))


def test_refuses_what_it_does_not_compute_before_any_child_starts(monkeypatch) -> None:
    def no_child(*args, **kwargs):
        raise AssertionError("a child was started for a batch the teaching kernel refuses")

    monkeypatch.setattr(teaching, "run_in_interpreter", no_child)
    with pytest.raises(PathUnavailableError, match=r"decode only \(one query per request\), got q_lens \[3, 1\]"):
        teaching.run(_batch(q_lens=(3, 1)), 4)
    with pytest.raises(PathUnavailableError, match="head_dim 24 and page_size 1 must be powers of two"):
        teaching.run(_batch(head_dim=24), 4)
    with pytest.raises(PathUnavailableError, match="bfloat16 in Triton's CPU interpreter"):
        teaching.run(_batch(dtype=torch.bfloat16), 4)
    with pytest.raises(ValueError, match="keys"):
        teaching.run(_batch(), 0)


def test_run_says_the_interpreter_ran_it_on_a_cpu() -> None:
    batch = _batch(page_size=4)
    poison_unattended(batch, 6)
    result = teaching.run(batch, 6)
    assert (result.path, result.tier, result.device) == ("kit_teaching", "kit-triton-interpreter", "cpu")
    assert _error(result.out, batch, 6) < TOLERANCE


if __name__ == "__main__":
    _worker(sys.argv[1])
