"""Model layouts: configs read through transformers, KV bytes per token, draft layouts."""
