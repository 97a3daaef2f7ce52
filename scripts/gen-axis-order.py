#!/usr/bin/env python3
"""Write src/geometry/northing_first.rs: the EPSG CRSs whose first axis
points north or south (latitude or northing first), read from PROJ's
database. PostGIS's spatial_ref_sys WKT often has no AXIS, so the order
cannot be read from the database featurepipe talks to.

Usage: scripts/gen-axis-order.py [/usr/share/proj/proj.db]"""

import sqlite3
import sys

db = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/proj/proj.db"
conn = sqlite3.connect(db)
codes = sorted(
    int(code)
    for (code,) in conn.execute(
        """
        SELECT crs.code FROM (
          SELECT code, coordinate_system_auth_name AS a, coordinate_system_code AS cs
            FROM geodetic_crs
           WHERE auth_name = 'EPSG' AND type IN ('geographic 2D', 'geographic 3D')
          UNION ALL
          SELECT code, coordinate_system_auth_name, coordinate_system_code
            FROM projected_crs WHERE auth_name = 'EPSG'
        ) AS crs
        JOIN axis ON axis.coordinate_system_auth_name = crs.a
                 AND axis.coordinate_system_code = crs.cs
                 AND axis.coordinate_system_order = 1
        WHERE axis.orientation IN ('north', 'south')
        """
    )
)
lines = [
    "//! EPSG CRSs whose first axis is latitude or northing, generated from PROJ's",
    f"//! database by scripts/gen-axis-order.py ({len(codes)} codes). Do not edit.",
    "",
    "/// Sorted EPSG codes of CRSs whose first axis points north or south.",
    "#[rustfmt::skip]",
    "pub const NORTHING_FIRST: &[i32] = &[",
]
for i in range(0, len(codes), 12):
    lines.append("    " + ", ".join(str(c) for c in codes[i : i + 12]) + ",")
lines.append("];")
with open("src/geometry/northing_first.rs", "w") as out:
    out.write("\n".join(lines) + "\n")
print(f"{len(codes)} codes")
