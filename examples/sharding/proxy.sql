-- The proxy database of a sharded orders service: PL/Proxy sends each call of
-- place_order(customer, amount) to the one shard that owns the customer. It holds no
-- data and no outbox. Run it with the shards' connection strings:
--
--   psql -v shard0='host=db0 dbname=orders' -v shard1='host=db1 dbname=orders' \
--        -v shard2='host=db2 dbname=orders' -f proxy.sql
\set ON_ERROR_STOP 1

CREATE EXTENSION plproxy;        -- the language and the foreign data wrapper "plproxy"

-- The cluster "orders": partition n is shard n. PL/Proxy picks partition
-- hash mod 3 (modular_mapping; without it the partition count must be a power of two
-- and the hash is masked). The partition list is the distribution: changing it moves
-- customers to other shards, so it changes only with a data migration.
CREATE SERVER orders FOREIGN DATA WRAPPER plproxy OPTIONS (
    modular_mapping     '1',
    connection_lifetime '1800',
    p0 :'shard0',
    p1 :'shard1',
    p2 :'shard2'
);
-- Connects to the shards as the calling role (add user/password options as needed).
CREATE USER MAPPING FOR PUBLIC SERVER orders;
-- A role other than the superuser needs: GRANT USAGE ON FOREIGN SERVER orders TO app;

-- The application's only entry point. PL/Proxy runs
-- SELECT * FROM place_order(customer, amount) on the shard the customer hashes to, as
-- one transaction there, and returns its result (the order id).
CREATE FUNCTION place_order(customer text, amount int) RETURNS bigint
LANGUAGE plproxy AS $$
    CLUSTER 'orders';
    RUN ON hashtext(customer);
$$;

-- Which shard owns a customer: the same rule, for operators (and for the test).
CREATE FUNCTION shard_of(customer text) RETURNS int
LANGUAGE sql IMMUTABLE AS $$ SELECT abs(hashtext(customer) % 3) $$;
