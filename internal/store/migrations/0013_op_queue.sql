-- 0013: the queue of direct workspace operations that control plane
-- replicas share: an operation asked of one replica, run by a worker that
-- long-polls another. op is the operation as JSON, without credential
-- values; result is the worker's answer; op_queue_output holds a streamed
-- operation's output. Rows live as long as the request that queued them.

CREATE TABLE op_queue (
    id        TEXT PRIMARY KEY,
    host      TEXT NOT NULL,
    op        TEXT NOT NULL,
    queued_at {{.Time}} NOT NULL,
    taken_at  {{.Time}},
    result    TEXT
);

CREATE INDEX op_queue_waiting ON op_queue (queued_at, id) WHERE taken_at IS NULL;

CREATE TABLE op_queue_output (
    seq   {{.Serial}},
    op_id TEXT NOT NULL,
    data  TEXT NOT NULL
);

CREATE INDEX op_queue_output_op ON op_queue_output (op_id, seq);
