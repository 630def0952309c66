"""Servers and the processes around them, as three programs and what they share.

    server/   the program inside a replica: `python -m rlrm.launch.server` (FastAPI + transformers), its
              model endpoints, dynamic batching, weight loads and sleep mode
    fleet/    the trainer's supervisor of processes: starts replicas of any backend (embedded, vLLM,
              SGLang) and the SGLang router, checks health, restarts the dead, stops them by pid
    client/   what the trainer and the reward loop speak to replicas with: the balancer, the served
              rollout engine, the wire formats of each backend and the weight broadcast
    common/   what more than one of them needs: API keys, ports, model-info names, the weight-update group

`server` and `fleet` never import each other (the fleet starts the server by its command line); `client`
may use the fleet it is handed. The import contract in pyproject.toml keeps these layers.
"""
