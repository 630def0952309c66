"""Model runtime shared by the engine and the servers: generation types, the batched HF engine, loading."""
