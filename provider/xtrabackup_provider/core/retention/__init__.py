"""Chain-aware retention: the policy and plan model, the pure planner, the rules for what is not
a backup (binlogs, debris, unreadable manifests), and applying a plan under the host lock.
"""
