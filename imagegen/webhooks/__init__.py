"""Telling a job's caller that it ended: signed webhooks, kept until delivered."""
