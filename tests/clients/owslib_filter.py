"""OWSLib's OGC API - Features Part 3 support against featurepipe: the
queryables, and items filtered by CQL2 text and sorted. Usage:
owslib_filter.py BASE_URL. Prints the queryables' names, then the names of
the matching stations; any failure raises."""

import sys

from owslib.ogcapi.features import Features

api = Features(sys.argv[1])
queryables = api.collection_queryables("stations")
print(",".join(sorted(queryables["properties"])))

items = api.collection_items(
    "stations",
    filter="elevation > 200 AND name LIKE 'station 2%'",
    sortby=("elevation", "desc"),
    limit=100,
)
assert items["numberMatched"] == len(items["features"]), items
print(",".join(f["properties"]["name"] for f in items["features"]))
