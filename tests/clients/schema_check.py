"""A JSON Schema validator nobody here wrote (python-jsonschema) checks a
collection's schema as OGC API - Features Part 5 tests it: found through the
collection's `http://www.opengis.net/def/rel/ogc/1.0/schema` link, valid
JSON Schema 2020-12, and every feature read valid against it (the id against
the property with role "id", each property against its own). Each `type` is
one string, as QGIS reads it; a `null` is read only where the property says
`"nullable": true`.
Usage: schema_check.py BASE_URL COLLECTION. Prints how many features were
checked; any failure raises."""

import json
import sys
import urllib.request

from jsonschema import Draft202012Validator

base, collection = sys.argv[1], sys.argv[2]

# The type of a json column's values, which may be anything.
ANY_JSON = ["array", "boolean", "number", "object", "string", "null"]


def get(url, accept):
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request) as response:
        return response.headers.get("Content-Type"), json.load(response)


_, described = get(f"{base}/collections/{collection}", "application/json")
link = next(
    l for l in described["links"] if l["rel"] == "http://www.opengis.net/def/rel/ogc/1.0/schema"
)
assert link["href"] == f"{base}/collections/{collection}/schema", link
media_type, schema = get(link["href"], "application/schema+json")
assert media_type == "application/schema+json", media_type
Draft202012Validator.check_schema(schema)
assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", schema
assert schema["$id"] == link["href"] and schema["type"] == "object", schema

properties = schema["properties"]
for name, s in properties.items():
    assert isinstance(s.get("type", ""), str) or s["type"] == ANY_JSON, (name, s)
    assert "type" in s or ("$ref" not in s and s["format"].startswith("geometry-")), (name, s)
(key,) = [s for s in properties.values() if s.get("x-ogc-role") == "id"]
assert key["type"] in ("string", "integer"), key

_, page = get(f"{base}/collections/{collection}/items?limit=1000", "application/geo+json")
for feature in page["features"]:
    Draft202012Validator(key).validate(feature["id"])
    for name, value in feature["properties"].items():
        # additionalProperties is false: every property read is in the schema.
        if value is None:
            assert properties[name].get("nullable") is True, (name, properties[name])
        else:
            Draft202012Validator(properties[name]).validate(value)
print(len(page["features"]))
