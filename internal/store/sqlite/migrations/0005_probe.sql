-- One row that readiness checks rewrite: a real durable write, so /readyz
-- fails when the database can take reads but not commits (a full disk,
-- a write lock held elsewhere), exactly when every webhook would get 503.
CREATE TABLE probe (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    at INTEGER NOT NULL
);
