-- 0009: session streams and run metadata (package runs, SessionStore).
-- A run's records are ordered per stream ('input' or 'output') by seq,
-- from 1; idempotency_key, when an append carried one, makes the append
-- idempotent within the stream. data and value are compact JSON.

CREATE TABLE run_stream_records (
    run_id          TEXT NOT NULL REFERENCES runs (id),
    stream          TEXT NOT NULL,
    seq             {{.BigInt}} NOT NULL,
    idempotency_key TEXT,
    time            {{.Time}} NOT NULL,
    data            TEXT NOT NULL,
    PRIMARY KEY (run_id, stream, seq)
){{.WithoutRowID}};

CREATE UNIQUE INDEX run_stream_records_idempotency ON run_stream_records (run_id, stream, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE run_metadata (
    run_id     TEXT NOT NULL REFERENCES runs (id),
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at {{.Time}} NOT NULL,
    PRIMARY KEY (run_id, key)
){{.WithoutRowID}};
