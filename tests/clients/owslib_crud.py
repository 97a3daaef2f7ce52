"""OWSLib (an OGC API client nobody here wrote) creates, reads, replaces and
deletes a feature through featurepipe. Usage: owslib_crud.py BASE_URL.
Prints the new feature's id; any failure raises."""

import sys

from owslib.ogcapi.features import Features

api = Features(sys.argv[1])
assert "stations" in api.feature_collections(), api.feature_collections()

feature = {
    "type": "Feature",
    "geometry": {"type": "Point", "coordinates": [1.5, 2.5]},
    "properties": {"name": "from owslib", "elevation": 3.25},
}
api.collection_item_create("stations", feature)
fid = api.response_headers["Location"].rsplit("/", 1)[1]

item = api.collection_item("stations", fid)
assert item["properties"]["name"] == "from owslib", item
assert item["geometry"]["coordinates"] == [1.5, 2.5], item

feature["properties"]["name"] = "replaced by owslib"
feature["geometry"]["coordinates"] = [-3.0, 4.0]
api.collection_item_update("stations", fid, feature)
item = api.collection_item("stations", fid)
assert item["properties"]["name"] == "replaced by owslib", item

api.collection_item_delete("stations", fid)
try:
    api.collection_item("stations", fid)
except RuntimeError:
    pass
else:
    raise AssertionError("the deleted feature can still be read")
print(fid)
