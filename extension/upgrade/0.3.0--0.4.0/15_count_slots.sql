-- 0.4.0: the counts of the history get a slot per settling backend
-- (extension/src/35_engine_tables.sql, outbox.history_counts); 0.3.0's rows are slot 0.
ALTER TABLE outbox.history_counts ADD COLUMN slot smallint NOT NULL DEFAULT 0;
ALTER TABLE outbox.history_counts DROP CONSTRAINT history_counts_pkey,
                                  ADD CONSTRAINT history_counts_pkey PRIMARY KEY (partition, endpoint, slot);
