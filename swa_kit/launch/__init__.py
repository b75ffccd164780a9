"""A real SGLang launch: what it is made of and what SGLang decides for it.

* :mod:`~swa_kit.launch.inputs`: :class:`Launch` (model config, server arguments, environment,
  platform, SGLang version) read as SGLang spells them;
* :mod:`~swa_kit.launch.backend`: the attention backend SGLang picks and whether it builds a hybrid pool;
* :mod:`~swa_kit.launch.pool_sizing`: full and SWA pool sizes as SGLang's configurators compute them;
* :mod:`~swa_kit.models.drafts`: the draft worker's layout and pool per speculative algorithm;
* :mod:`~swa_kit.launch.decide`: :func:`decide` -> every decision with the SGLang source it mirrors.

Where new work goes:

* a server argument, platform or SGLang version the kit reads: ``swa_kit/launch/inputs.py``
* SGLang's start-up choice of an attention backend (a per-architecture override, a platform default):
  ``swa_kit/launch/backend.py``; a start-up refusal: ``swa_kit/launch/speculation.py``
* a decision of SGLang's that the audit reports: ``swa_kit/launch/decide.py``, with the SGLang source it
  mirrors, and the same decision asked of SGLang itself in ``swa_kit/launch/sglang_oracle.py``
  (``tests/test_deploy_sglang.py`` holds the two against each other)
* where vLLM puts a drafter's layers, or what it charges a request at admission: ``swa_kit/launch/vllm_drafter.py``,
  ``swa_kit/launch/vllm_admission.py`` (``tests/test_vllm_drafter.py`` holds them against vLLM's own code)
"""
