-- One row that readiness checks rewrite: a real durable write, so /readyz
-- fails when the database can take reads but not commits (a full disk, a
-- read-only replica after a failover), exactly when every webhook would get
-- 503.
CREATE TABLE probe (
    id integer PRIMARY KEY CHECK (id = 1),
    at timestamptz NOT NULL
);
