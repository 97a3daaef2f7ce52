"""A JSON Schema validator nobody here wrote (python-jsonschema) checks what
featurepipe serves as JSON-FG against the JSON-FG 1.0 schemas of the
specification (tests/jsonfg/*.min.json): each URL is read with
`Accept: application/fg+json` and validated as a Feature or a
FeatureCollection, as its `type` says.
Usage: jsonfg_check.py SCHEMA_DIR URL... Prints how many documents were
checked; any failure raises."""

import json
import sys
import urllib.request

from jsonschema import Draft202012Validator

schemas, urls = sys.argv[1], sys.argv[2:]
validators = {}
for kind, name in [("Feature", "feature"), ("FeatureCollection", "featurecollection")]:
    with open(f"{schemas}/{name}.min.json") as f:
        schema = json.load(f)
    Draft202012Validator.check_schema(schema)
    validators[kind] = Draft202012Validator(schema)

for url in urls:
    request = urllib.request.Request(url, headers={"Accept": "application/fg+json"})
    with urllib.request.urlopen(request) as response:
        media_type = response.headers.get("Content-Type")
        document = json.load(response)
    assert media_type == "application/fg+json", (url, media_type)
    validators[document["type"]].validate(document)
print(len(urls))
