"""Model layouts: configs read through transformers, KV bytes per token, draft layouts.

Where new work goes:

* a new architecture (model): a row in ``ARCHITECTURES`` of ``swa_kit/models/configs.py`` (the
  ``sliding_window_size`` SGLang's model file hands ``RadixAttention``, whether it gets a hybrid pool, its MTP
  draft; and in ``RUNNER_WINDOW_RULES`` if its class has its own ``get_attention_sliding_window_size``); any
  ``config.json`` of it then reads through transformers' own class. To list it in ``swa-kit models``, bundle a
  shortcut ``data/models/<name>.json`` (a real-shaped config under ``hf_config``, each field's source). Tests:
  ``tests/test_configs.py``, ``tests/test_memory.py``; and a config of it saved by transformers' own class in
  ``scripts/differential_configs.py``, which ``tests/test_differential_sglang.py`` holds against SGLang's model
  class, resolution, pools and aiter and Triton backends
* a draft's layout or pool under a speculative algorithm: ``swa_kit/models/drafts.py``
"""
