-- effects_flow serves one query: the operators' list of a flow's effects
-- in id order, which names the flow. It now holds the rows whose flow is
-- not empty (every effect's), and that list repeats the predicate, so no
-- other statement can use the index.
--
-- Why: a settle group looks up each entity's open effects by flow, entity
-- and effect name (effects_open). On a small table the planner costed the
-- lookup through effects_flow, which names the flow alone, about the
-- same, and chose it for being the smaller index; PostgreSQL then kept
-- that plan while the table grew to a few thousand effects, reading every
-- effect of the flow for each entity of each group until the table's next
-- ANALYZE. It cost a new install's pipeline about 5 % of the database's
-- time. TestSupersedePlanOnSmallTables plans the lookup on such a table.
DROP INDEX effects_flow;
CREATE INDEX effects_flow ON effects (flow, id) WHERE flow <> '';
