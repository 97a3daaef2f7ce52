-- featurepipe.fail raises an error with the given SQLSTATE. Edit sessions
-- send every statement before reading any answer; a feature that is missing
-- (P0002) or has changed (FP412, If-Match) must fail its statement so that
-- the transaction cannot commit around it.
CREATE FUNCTION featurepipe.fail(code text, message text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
END
$$;
COMMENT ON FUNCTION featurepipe.fail(text, text) IS 'Raises: used by featurepipe edit sessions.';
