"""The hybrid KV-cache manager's switch: the kit's rule against vLLM 0.34's own ``VllmConfig.__post_init__``.

vLLM builds the config on this CPU with its CPU platform told two things a ROCm GPU would answer:
``support_hybrid_kv_cache()`` is True (``RocmPlatform``) and ``check_and_update_config`` does nothing (the CPU
platform's would refuse without triton-cpu; it changes nothing the switch reads). Each model's ``ModelConfig`` is
vLLM's own, read from the bundled config; Llama 4 is read through its text config (``Llama4ForCausalLM``), because
the multimodal class needs torchvision, which has no build for this CPU torch; the switch reads only the text
config's ``attention_chunk_size``. Launches with a drafter need the draft's checkpoint and are not compared here.
"""

from __future__ import annotations

import json
import os

import pytest

from vllm_support import require_vllm

pytestmark = pytest.mark.vllm

cpu, config = require_vllm("vllm.platforms.cpu", "vllm.config")

from swa_kit.errors import UsageError  # noqa: E402
from swa_kit.launch.vllm_args import parse_vllm_flags  # noqa: E402
from swa_kit.launch.vllm_plan import plan  # noqa: E402
from swa_kit.models.configs import load_model  # noqa: E402


MODELS = ("gpt-oss-20b", "llama4-scout")
FLAGS = ("", "--disable-hybrid-kv-cache-manager", "--no-disable-hybrid-kv-cache-manager")
CHUNKED_ENV = (None, "1", "0")  # None: unset, vLLM's default
ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"


@pytest.fixture(scope="module")
def model_configs(tmp_path_factory):
    answers = pytest.MonkeyPatch()  # vLLM's modules hold the platform object itself: patch its class
    answers.setattr(cpu.CpuPlatform, "check_and_update_config", classmethod(lambda cls, vllm_config: None))
    answers.setattr(cpu.CpuPlatform, "support_hybrid_kv_cache", classmethod(lambda cls: True))
    configs = {}
    for name in MODELS:
        hf = load_model(name).hf_config
        if "text_config" in hf and hf.get("model_type") == "llama4":
            hf = {**hf["text_config"], "architectures": ["Llama4ForCausalLM"]}
        folder = tmp_path_factory.mktemp(name)
        (folder / "config.json").write_text(json.dumps(hf))
        configs[name] = config.ModelConfig(model=str(folder), skip_tokenizer_init=True)
    yield configs
    answers.undo()


def _set(monkeypatch, env: str | None) -> None:
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)


def _vllm_switch(model_config, flag: bool | None) -> bool | str:
    try:
        scheduler = config.SchedulerConfig(disable_hybrid_kv_cache_manager=flag, is_encoder_decoder=False,
                                           max_model_len=model_config.max_model_len)
        built = config.VllmConfig(model_config=model_config, scheduler_config=scheduler)
    except ValueError as error:  # pydantic's ValidationError is a ValueError
        return f"refused: {error}"
    return built.scheduler_config.disable_hybrid_kv_cache_manager


@pytest.mark.parametrize("env", CHUNKED_ENV)
@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("name", MODELS)
def test_switch_agrees_with_vllm(model_configs, name, flags, env, monkeypatch):
    _set(monkeypatch, env)
    args = parse_vllm_flags(flags)
    theirs = _vllm_switch(model_configs[name], args.disable_hybrid_kv_cache_manager)
    try:
        kit: bool | str = plan(load_model(name), args, {} if env is None else {ENV: env}).kv.hybrid_disabled
    except UsageError as error:
        kit = f"refused: {error}"
    if isinstance(theirs, str) or isinstance(kit, str):
        assert isinstance(theirs, str) and isinstance(kit, str), f"vLLM: {theirs}; kit: {kit}"
        assert "explicitly enabled" in theirs and "explicitly enabled" in kit
    else:
        assert kit == theirs
    assert os.environ.get(ENV) == env


def test_the_cases_reach_both_answers_and_the_refusal(model_configs, monkeypatch):
    seen = set()
    for env in CHUNKED_ENV:
        _set(monkeypatch, env)
        for flags in FLAGS:
            flag = parse_vllm_flags(flags).disable_hybrid_kv_cache_manager
            answer = _vllm_switch(model_configs["llama4-scout"], flag)
            seen.add(answer if isinstance(answer, bool) else "refused")
    assert seen == {True, False, "refused"}
