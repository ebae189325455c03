"""Reaper: turns findings into a safe plan, applies it to Kubernetes, and tells people in Slack."""
