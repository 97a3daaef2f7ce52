-- The compose file's database: behind a transaction-mode pooler the
-- statement timeout is the role's, not the session's (README).
ALTER ROLE featurepipe SET statement_timeout = '60s';
