"""Adapters that let agent harnesses drive Helmr workspaces.

Standard library only. ``helmr_adapters.client`` talks to a Helmr control
plane; ``helmr_adapters.minisweagent`` is a mini-swe-agent (v2)
environment that runs each action in a Helmr workspace.
"""
