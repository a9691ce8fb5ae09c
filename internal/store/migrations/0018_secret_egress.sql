-- 0018: a secret bound for egress injection keeps its rule (the hosts its
-- value may be sent to, JSON of vault.Egress); empty: the secret is placed
-- inside the sandboxes that bind it.

ALTER TABLE secrets ADD COLUMN egress TEXT NOT NULL DEFAULT '';
