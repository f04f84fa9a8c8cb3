"""Replica choice: pools of replicas, balancing strategies, circuit breakers, health checks, fallbacks."""
