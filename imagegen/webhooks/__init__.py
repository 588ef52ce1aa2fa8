"""Telling a job's caller that it ended: signed webhooks, kept until delivered.

`addresses` says which URLs a webhook may reach, `signing` signs a delivery as the Standard
Webhooks specification says, `outbox` keeps what is still to deliver where the jobs are kept,
`delivery` sends it beside the requests and generations and retries it."""
