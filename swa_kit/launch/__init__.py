"""A real SGLang launch: what it is made of and what SGLang decides for it.

* :mod:`~swa_kit.launch.inputs`: :class:`Launch` (model config, server arguments, environment,
  platform, SGLang version) read as SGLang spells them;
* :mod:`~swa_kit.launch.backend`: the attention backend SGLang picks and whether it builds a hybrid pool;
* :mod:`~swa_kit.launch.pool_sizing`: full and SWA pool sizes as SGLang's configurators compute them;
* :mod:`~swa_kit.models.drafts`: the draft worker's layout and pool per speculative algorithm;
* :mod:`~swa_kit.launch.decide`: :func:`decide` -> every decision with the SGLang source it mirrors.
"""
