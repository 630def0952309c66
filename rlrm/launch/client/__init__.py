"""What the trainer and the reward loop use to talk to replicas.

balancer.py sends each request to the least busy healthy replica; rollout_engine.py is the rollout engine
that generates on policy servers and keeps their weights in step; wire.py says what a request and a
weight update look like for each backend; weight_broadcast.py is the trainer's side of a distributed
weight sync.
"""
