-- The demo table of `make run`: a point layer with a serial key and typed columns with defaults.
CREATE EXTENSION IF NOT EXISTS postgis;
CREATE TABLE IF NOT EXISTS public.places (
    id         serial PRIMARY KEY,
    name       text NOT NULL,
    kind       text NOT NULL DEFAULT 'poi',
    height_m   double precision,
    visited    boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    geom       geometry(Point, 4326) NOT NULL
);
COMMENT ON TABLE public.places IS 'Demo point layer created by make run';
