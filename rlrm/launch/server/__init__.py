"""The embedded inference server, the program that runs inside a replica: `python -m rlrm.launch.server`.

app.py builds the FastAPI app and runs it; routes.py adds the model endpoints (what they share in
endpoints.py): completions.py (OpenAI completions and chat), generate.py (SGLang's /generate), classify.py
(vLLM's /classify); backends.py holds the model (a causal LM or a sequence classifier) behind batcher.py;
weight_routes.py and group_routes.py take weight updates (from disk, or broadcast over a process group);
sleep.py moves weights off the accelerator between scorings.
"""
