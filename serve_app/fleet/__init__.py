"""What spans the ingress replicas, outside the request path: the statistics holder (one view of
every replica's audits, plans and overload), the key ledger (every API key's quotas and usage), and
the coupled autoscaling policy Serve's controller runs over every replica's reports."""
