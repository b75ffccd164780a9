"""What SGLang's own code says about a speculative launch's draft, for :mod:`swa_kit.launch.sglang_oracle` and
:mod:`swa_kit.measure.sglang_check`: read from the installed SGLang, never from the kit's tables.

* the DFLASH family's draft KV in the target's budget: ``KVCacheConfigurator.__post_init__`` sets
  ``dflash_draft_cell_size_per_token`` from ``mem_cache/draft_kv_budget.py resolve_dflash_draft_cell_size`` (the
  draft config's KV heads at the draft's attention-TP width x ``head_dim + v_head_dim`` x its layers x the KV dtype
  the draft worker resolves); the pool configurators add it to the full side's cell (``_dflash_draft_cell_size``);
* the draft layers SGLang counts in the budget: ``eagle_draft_num_layers`` (EAGLE / EAGLE3 / STANDALONE), else
  ``dflash_draft_num_layers`` (DFLASH, DSPARK) of ``resolve_spec_aux_hidden_state_config``;
* whether the algorithm's worker runs a draft model at all: the worker class ``SpeculativeAlgorithm.create_worker``
  returns declares a ``draft_worker`` property answering ``None`` for NGRAM and UNO (``ngram_worker.py``,
  ``uno_worker_v2.py``: "Both passes use the target runner and its KV pool"). The worker modules need a GPU to
  import, so their source is read with ``ast``.

The SGLang modules are handed in by the caller (``import_sglang``), which keeps aiter hidden while they import.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

Importer = Callable[[str], Any]


def dflash_draft_cell_size(import_sglang: Importer, spec_aux: Any, algorithm: Any) -> int | None:
    """``KVCacheConfigurator.dflash_draft_cell_size_per_token`` for the target worker (None where SGLang sets
    none: not the DFLASH family, or no draft config read)."""
    if not algorithm.is_dflash_family() or spec_aux.draft_model_config is None or \
            spec_aux.dflash_draft_num_layers is None:
        return None
    budget = import_sglang("sglang.srt.mem_cache.draft_kv_budget")
    runtime = import_sglang("sglang.srt.runtime_context")
    # the draft's attention-TP width: the draft worker's layout (draft_parallel.resolve_draft_parallel_layout),
    # which is draft_attn_parallel_group's width in the target scope
    return budget.resolve_dflash_draft_cell_size(draft_model_config=spec_aux.draft_model_config,
                                                 draft_num_layers=spec_aux.dflash_draft_num_layers,
                                                 attn_tp_size=runtime.draft_attn_tp_size())


def draft_layers_in_budget(spec_aux: Any) -> int | None:
    """The draft layers the pool configurators count beside the target's: EAGLE's, else the DFLASH family's."""
    if spec_aux.eagle_draft_num_layers is not None:
        return int(spec_aux.eagle_draft_num_layers)
    return None if spec_aux.dflash_draft_num_layers is None else int(spec_aux.dflash_draft_num_layers)


def _sglang_file(relative: str) -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("sglang")
    return Path(spec.submodule_search_locations[0]) / relative


def _worker_classes(spec_info_source: str) -> dict[str, tuple[str, str]]:
    """``create_worker``'s ``if self.is_X(): from M import C ... return C`` branches: predicate -> (module, class)."""
    tree = ast.parse(spec_info_source)
    create = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "create_worker")
    found: dict[str, tuple[str, str]] = {}
    for node in ast.walk(create):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Call)
                and isinstance(node.test.func, ast.Attribute) and node.test.func.attr.startswith("is_")
                and not node.test.args):
            continue
        imports = [n for n in node.body if isinstance(n, ast.ImportFrom) and n.module]
        returned = [n.value.id for n in node.body if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)]
        for imp in imports:
            for alias in imp.names:
                if alias.name in returned:
                    found.setdefault(node.test.func.attr, (str(imp.module), alias.name))
    return found


def _draft_worker_is_none(module_source: str, class_name: str) -> bool:
    """Whether ``class_name``'s ``draft_worker`` property returns the constant None and nothing else."""
    tree = ast.parse(module_source)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    prop = None if cls is None else next(
        (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "draft_worker"), None)
    if prop is None:
        return False
    returns = [n for n in ast.walk(prop) if isinstance(n, ast.Return)]
    return bool(returns) and all(isinstance(r.value, ast.Constant) and r.value.value is None for r in returns)


def runs_a_draft_model(algorithm: Any) -> bool:
    """Whether SGLang's worker for ``algorithm`` (its ``SpeculativeAlgorithm``) runs a draft model of its own, read
    from the installed source: False where the worker ``create_worker`` picks answers ``draft_worker`` with None."""
    branches = _worker_classes(_sglang_file("srt/speculative/spec_info.py").read_text())
    for predicate, (module, class_name) in branches.items():
        if getattr(algorithm, predicate)():
            path = _sglang_file(module.removeprefix("sglang.").replace(".", "/") + ".py")
            return not _draft_worker_is_none(path.read_text(), class_name)
    return True
