"""The licence check's parts, without the network or Go: the text classifier on sample texts,
SPDX expressions, the Nomad version rule, a Go module folder and Python distributions made
here (docs/licences.md, "How the check works" and "What fails")."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from tools.licences import golang, python, report, spdx
from tools.licences.texts import classify_text

MIT = """MIT License

Copyright (c) 2020 Someone

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND.
"""

MIT_0 = MIT.replace(
    "The above copyright notice and this permission notice shall be included in all\n"
    "copies or substantial portions of the Software.\n",
    "",
)

APACHE_HEADER = """Copyright 2015 Someone

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
"""

APACHE_FULL = """
                                 Apache License
                           Version 2.0, January 2004
                        http://www.apache.org/licenses/

   TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION
"""

_BSD_HEAD = """Copyright (c) 2009 The Authors. All rights reserved.

Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are
met:

   * Redistributions of source code must retain the above copyright
notice, this list of conditions and the following disclaimer.
   * Redistributions in binary form must reproduce the above
copyright notice, this list of conditions and the following disclaimer
in the documentation and/or other materials provided with the
distribution.
"""
BSD_2 = _BSD_HEAD + "\nTHIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AS IS.\n"
BSD_3 = (
    _BSD_HEAD
    + """   * Neither the name of the copyright holder nor the names of its
contributors may be used to endorse or promote products derived from
this software without specific prior written permission.
"""
)
BSD_4 = BSD_3 + (
    "   * All advertising materials mentioning features or use of this software must display "
    "the following acknowledgement.\n"
)

ISC = """Copyright (c) 2012 Someone

Permission to use, copy, modify, and/or distribute this software for any
purpose with or without fee is hereby granted, provided that the above
copyright notice and this permission notice appear in all copies.
"""
ZERO_BSD = """Permission to use, copy, modify, and/or distribute this software for any
purpose with or without fee is hereby granted.

THE SOFTWARE IS PROVIDED "AS IS" AND THE AUTHOR DISCLAIMS ALL WARRANTIES.
"""
MPL_2 = """Mozilla Public License Version 2.0
==================================

1. Definitions
--------------
"""
UNLICENSE = """This is free and unencumbered software released into the public domain.

Anyone is free to copy, modify, publish, use, compile, sell, or distribute this software.
"""
LGPL_3 = """                   GNU LESSER GENERAL PUBLIC LICENSE
                       Version 3, 29 June 2007

  This version of the GNU Lesser General Public License incorporates the terms and
conditions of version 3 of the GNU General Public License.
"""
ZLIB = """This software is provided 'as-is', without any express or implied
warranty.  In no event will the authors be held liable for any damages
arising from the use of this software.

3. Altered source versions must be plainly marked as such, and must not be
   misrepresented as being the original software.
"""

#: The shape of HashiCorp's BUSL file: it names the MPL-2.0 as its Change License.
BUSL = """License text copyright (c) 2020 MariaDB Corporation Ab, All Rights Reserved.
"Business Source License" is a trademark of MariaDB Corporation Ab.

Parameters

Licensor:             HashiCorp, Inc.
Licensed Work:        Nomad Version 1.7.0 or later.
Change Date:          Four years from the date the Licensed Work is published.
Change License:       MPL 2.0

For information about alternative licensing arrangements for the Licensed Work,
please contact licensing@hashicorp.com.

Notice

Business Source License 1.1

Terms

The Licensor hereby grants you the right to copy, modify, create derivative
works, redistribute, and make non-production use of the Licensed Work.

Mozilla Public License, version 2.0
"""
SSPL = "Server Side Public License\nVERSION 1, OCTOBER 16, 2018\n"
ELASTIC = "Elastic License 2.0\n\nURL: https://www.elastic.co/licensing/elastic-license\n"
COMMONS_CLAUSE = (
    '"Commons Clause" License Condition v1.0\n\nThe Software is provided to you by the Licensor '
    "under the License, as defined below, subject to the following condition.\n" + APACHE_HEADER
)
SOURCE_AVAILABLE = "Acme Source Available License 1.0\n\nYou may read the source code.\n"
PROPRIETARY = "Copyright (c) 2024 Acme Corp. All rights reserved. Do not distribute.\n"


@pytest.mark.parametrize(
    ("text", "licences"),
    [
        (MIT, ("MIT",)),
        (MIT_0, ("MIT-0",)),
        (APACHE_HEADER, ("Apache-2.0",)),
        (APACHE_FULL, ("Apache-2.0",)),
        (BSD_2, ("BSD-2-Clause",)),
        (BSD_3, ("BSD-3-Clause",)),
        (BSD_4, ("BSD-4-Clause",)),
        (ISC, ("ISC",)),
        (ZERO_BSD, ("0BSD",)),
        (MPL_2, ("MPL-2.0",)),
        (UNLICENSE, ("Unlicense",)),
        (LGPL_3, ("LGPL-3.0",)),
        (ZLIB, ("Zlib",)),
        (APACHE_FULL + MIT, ("Apache-2.0", "MIT")),
        (BSD_3 + BSD_2, ("BSD-2-Clause", "BSD-3-Clause")),
        (
            BSD_3.replace("binary forms, with", "binary forms of libcap/psx, with"),
            ("BSD-3-Clause",),
        ),
    ],
)
def test_known_texts_are_recognised(text: str, licences: tuple[str, ...]) -> None:
    result = classify_text(text)
    assert result.licences == licences
    assert result.forbidden == ()
    assert not result.unknown


@pytest.mark.parametrize(
    ("text", "forbidden"),
    [
        (BUSL, "BUSL-1.1"),
        (SSPL, "SSPL-1.0"),
        (ELASTIC, "Elastic-2.0"),
        (COMMONS_CLAUSE, "Commons-Clause"),
        (SOURCE_AVAILABLE, "source-available"),
    ],
)
def test_forbidden_licences_are_named(text: str, forbidden: str) -> None:
    assert classify_text(text).forbidden == (forbidden,)


def test_forbidden_wins_over_an_open_licence_in_the_same_text() -> None:
    # BUSL's Change License is the MPL-2.0, the Commons Clause rides on Apache-2.0.
    assert classify_text(BUSL).licences == ("MPL-2.0",)
    assert classify_text(COMMONS_CLAUSE).licences == ("Apache-2.0",)


def test_unknown_text_is_unknown() -> None:
    assert classify_text(PROPRIETARY).unknown
    assert classify_text("").unknown


def test_mpl_text_naming_the_gpl_family_is_only_mpl() -> None:
    # MPL-2.0's "Secondary License" section names the GPL, LGPL and AGPL without being them.
    text = MPL_2 + (
        '1.12. "Secondary License" means either the GNU General Public License, Version 2.0, '
        "the GNU Lesser General Public License, Version 2.1, the GNU Affero General Public "
        "License, Version 3.0, or any later versions of those licenses.\n"
    )
    assert classify_text(text).licences == ("MPL-2.0",)


# --- SPDX expressions ------------------------------------------------------------------------


def test_expression_or_needs_one_accepted_branch_and_needs_all() -> None:
    assert spdx.parse("GPL-2.0-or-later OR Apache-2.0").holds(spdx.accepted)
    assert not spdx.parse("MIT AND CC0-1.0").holds(spdx.accepted)
    assert spdx.parse("(MIT OR CC0-1.0) AND Apache-2.0").holds(spdx.accepted)
    assert spdx.parse("GPL-2.0-or-later WITH Classpath-exception-2.0").licences() == (
        "GPL-2.0-or-later",
    )
    assert spdx.parse("apache-2.0 or bsd-3-clause").licences() == ("Apache-2.0", "BSD-3-Clause")


@pytest.mark.parametrize("text", ["BUSL-1.1", "LicenseRef-Acme", "MIT AND", "(MIT", "", "MIT MIT"])
def test_unknown_or_malformed_expressions_raise(text: str) -> None:
    with pytest.raises(spdx.ExpressionError):
        spdx.parse(text)


def test_psf_accepted_cc0_and_busl_not() -> None:
    assert spdx.accepted("PSF-2.0")
    assert spdx.accepted("MIT")
    assert not spdx.accepted("CC0-1.0")
    assert not spdx.accepted("BUSL-1.1")
    assert not spdx.accepted("CC-BY-SA-4.0")


# --- The Nomad version rule ------------------------------------------------------------------


@pytest.mark.parametrize(
    "version",
    [
        "v1.7.0",
        "v1.7.0-beta.1",
        "v1.7.7",
        "v1.11.3",
        "v2.0.0",
        "v0.0.0-20231030125810-e0497bff1437",
        "v1.6.4-0.20231101000000-abcdefabcdef",
        "main",
    ],
)
def test_nomad_from_1_7_0_or_at_a_pseudo_version_is_refused(version: str) -> None:
    reason = golang.nomad_refusal("github.com/hashicorp/nomad", version)
    assert reason is not None
    assert version in reason


@pytest.mark.parametrize("version", ["v1.6.3", "v1.6.0", "v1.5.15", "v0.12.12"])
def test_nomad_releases_before_1_7_0_pass(version: str) -> None:
    assert golang.nomad_refusal("github.com/hashicorp/nomad", version) is None


def test_the_nomad_rule_is_for_the_nomad_module_only() -> None:
    # The api module stays MPL-2.0 and is pinned at a pseudo-version (components.py).
    assert golang.nomad_refusal("github.com/hashicorp/nomad/api", "v1.8.0") is None
    assert golang.nomad_refusal("github.com/hashicorp/nomad-autoscaler", "v1.9.0") is None


# --- A Go module folder ----------------------------------------------------------------------


def _module(tmp_path: Path, files: dict[str, str]) -> Path:
    d = tmp_path / "mod"
    d.mkdir()
    (d / "go.mod").write_text("module example.com/m\n")
    for name, text in files.items():
        (d / name).write_text(text)
    return d


def test_go_module_with_mit_passes(tmp_path: Path) -> None:
    c = golang.check_module("example.com/m@v1.0.0", _module(tmp_path, {"LICENSE": MIT}))
    assert c.ok
    assert c.licences == ("MIT",)
    assert c.source == "LICENSE"


def test_go_module_with_several_licence_files_records_all(tmp_path: Path) -> None:
    d = _module(tmp_path, {"LICENSE-APACHE": APACHE_FULL, "LICENSE-MIT": MIT, "COPYING": BSD_3})
    c = golang.check_module("example.com/m@v1.0.0", d)
    assert c.ok
    assert c.licences == ("Apache-2.0", "BSD-3-Clause", "MIT")


def test_go_module_under_busl_fails_naming_module_and_file(tmp_path: Path) -> None:
    c = golang.check_module("example.com/m@v1.0.0", _module(tmp_path, {"LICENSE": BUSL}))
    assert not c.ok
    assert any("example.com/m@v1.0.0" in p and "LICENSE" in p and "BUSL" in p for p in c.problems)


def test_nomad_1_7_0_fails_by_version_whatever_its_file_says(tmp_path: Path) -> None:
    d = _module(tmp_path, {"LICENSE": MPL_2})
    mods = [golang.GoModule("github.com/hashicorp/nomad", "v1.7.0", "", d, {"nomad"})]
    (c,) = golang.check_modules(mods)
    assert not c.ok
    assert any("v1.7.0" in p and "Business Source License" in p for p in c.problems)
    ok = golang.check_modules([golang.GoModule("github.com/hashicorp/nomad", "v1.6.3", "", d)])
    assert ok[0].ok


def test_a_replacement_at_a_busl_nomad_version_fails(tmp_path: Path) -> None:
    d = _module(tmp_path, {"LICENSE": MPL_2})
    mod = golang.GoModule(
        "github.com/hashicorp/nomad", "v1.6.3", "github.com/hashicorp/nomad@v1.8.0", d
    )
    (c,) = golang.check_modules([mod])
    assert not c.ok


def test_go_module_without_licence_file_fails(tmp_path: Path) -> None:
    c = golang.check_module("example.com/m@v1.0.0", _module(tmp_path, {"README.md": "MIT"}))
    assert not c.ok
    assert "no licence file" in c.problems[0]


def test_go_module_with_unknown_text_fails_naming_module_and_file(tmp_path: Path) -> None:
    c = golang.check_module("example.com/m@v1.0.0", _module(tmp_path, {"LICENSE.txt": PROPRIETARY}))
    assert c.problems == (
        "example.com/m@v1.0.0: LICENSE.txt is a licence text the classifier does not know",
    )


def test_go_module_with_a_non_osi_licence_fails(tmp_path: Path) -> None:
    cc0 = "Creative Commons Legal Code\n\nCC0 1.0 Universal\n"
    c = golang.check_module("example.com/m@v1.0.0", _module(tmp_path, {"LICENSE": cc0}))
    assert not c.ok
    assert "CC0-1.0" in c.problems[0]


def test_documentation_licence_is_accepted_beside_the_code_licence(tmp_path: Path) -> None:
    docs = "Attribution-ShareAlike 4.0 International\n"
    d = _module(tmp_path, {"LICENSE": APACHE_FULL, "LICENSE.docs": docs})
    c = golang.check_module("example.com/m@v1.0.0", d)
    assert c.ok
    assert c.licences == ("Apache-2.0", "CC-BY-SA-4.0 (documentation)")


def test_go_exception_is_by_exact_version_and_never_covers_busl(tmp_path: Path) -> None:
    table = {"example.com/m@v1.0.0": ("MIT", "its README says MIT")}
    bare = _module(tmp_path, {})
    c = golang.check_module("example.com/m@v1.0.0", bare, exceptions=table)
    assert c.ok
    assert (c.licences, c.exception) == (("MIT",), "its README says MIT")
    assert not golang.check_module("example.com/m@v1.0.1", bare, exceptions=table).ok
    (bare / "LICENSE").write_text(BUSL)
    assert not golang.check_module("example.com/m@v1.0.0", bare, exceptions=table).ok


def test_go_list_command_is_readonly_with_tags_and_test() -> None:
    from devstack.components import nomad, vk_e2e

    n = nomad()
    cmd = golang.list_command(n, n.binaries[0].package, test=False)
    assert cmd[:3] == ["list", "-mod=readonly", "-deps"]
    assert cmd[cmd.index("-tags") + 1] == "hashicorpmetrics,codegen_generated"
    e = vk_e2e()
    assert "-test" in golang.list_command(e, e.binaries[0].package, test=True)


# --- Python distributions --------------------------------------------------------------------


def _dist(
    tmp_path: Path, headers: list[str], files: dict[str, str] | None = None
) -> metadata.Distribution:
    info = tmp_path / "acme-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "\n".join(["Metadata-Version: 2.4", "Name: acme", "Version: 1.0", *headers]) + "\n"
    )
    record = ["acme-1.0.dist-info/METADATA,,"]
    for name, text in (files or {}).items():
        path = info / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        record.append(f"acme-1.0.dist-info/{name},,")
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return metadata.PathDistribution(info)


@pytest.mark.parametrize(
    ("headers", "licences", "source"),
    [
        (["License-Expression: MIT OR Apache-2.0"], ("MIT OR Apache-2.0",), "License-Expression"),
        (["Classifier: License :: OSI Approved :: MIT License"], ("MIT",), "classifiers"),
        (
            [
                "Classifier: License :: OSI Approved",
                "Classifier: License :: DFSG approved",
                "Classifier: License :: OSI Approved :: BSD License",
            ],
            ("BSD License",),
            "classifiers",
        ),
        (["License: Apache 2.0"], ("Apache-2.0",), "License field"),
        (["License: Apache-2.0 OR BSD-3-Clause"], ("Apache-2.0 OR BSD-3-Clause",), "License field"),
        (["License: LGPLv3"], ("LGPL-3.0",), "License field"),
    ],
)
def test_distribution_metadata_decides(
    tmp_path: Path, headers: list[str], licences: tuple[str, ...], source: str
) -> None:
    c = python.check_distribution(_dist(tmp_path, headers), exceptions={})
    assert c.ok, c.problems
    assert (c.licences, c.source) == (licences, source)


def test_a_family_classifier_is_made_exact_by_the_field_or_the_files(tmp_path: Path) -> None:
    bsd = _dist(
        tmp_path / "a",
        ["Classifier: License :: OSI Approved :: BSD License"],
        {"licenses/LICENSE": BSD_3},
    )
    assert python.check_distribution(bsd, exceptions={}).licences == ("BSD-3-Clause",)
    apache = _dist(
        tmp_path / "b",
        ["License: Apache 2.0", "Classifier: License :: OSI Approved :: Apache Software License"],
    )
    assert python.check_distribution(apache, exceptions={}).licences == ("Apache-2.0",)
    # Two BSD texts: which one the classifier means is not known, it stays as it is.
    both = _dist(
        tmp_path / "c",
        ["Classifier: License :: OSI Approved :: BSD License"],
        {"licenses/LICENSE": BSD_3 + BSD_2},
    )
    assert python.check_distribution(both, exceptions={}).licences == ("BSD License",)


def test_distribution_licence_files_decide_without_metadata(tmp_path: Path) -> None:
    c = python.check_distribution(
        _dist(tmp_path, ["License: UNKNOWN"], {"licenses/LICENSE": MIT}), exceptions={}
    )
    assert c.ok
    assert c.licences == ("MIT",)
    assert c.source == "files: licenses/LICENSE"


@pytest.mark.parametrize(
    ("headers", "files", "needle"),
    [
        (["License-Expression: BUSL-1.1"], {}, "BUSL-1.1"),
        (["License-Expression: MIT AND CC0-1.0"], {}, "not open source"),
        (["Classifier: License :: Other/Proprietary License"], {}, "Other/Proprietary"),
        ([], {}, "no licence"),
        ([], {"licenses/LICENSE": PROPRIETARY}, "does not know"),
        ([f"License: {SSPL}"], {}, "SSPL"),
        # The metadata says MIT, the licence file is the BUSL: the file is searched all the same.
        (["License-Expression: MIT"], {"licenses/LICENSE": BUSL}, "BUSL-1.1"),
        (["License-Expression: LicenseRef-Acme-Source-Available"], {}, "source-available"),
    ],
)
def test_distribution_failures_name_it(
    tmp_path: Path, headers: list[str], files: dict[str, str], needle: str
) -> None:
    c = python.check_distribution(_dist(tmp_path, headers, files), exceptions={})
    assert not c.ok
    assert all(p.startswith("acme: ") for p in c.problems)
    assert any(needle in p for p in c.problems), c.problems


def test_python_exception_holds_only_for_the_reviewed_metadata(tmp_path: Path) -> None:
    table = {"acme": ("MIT AND CC0-1.0", "CC0 covers one bundled file")}
    ok = python.check_distribution(
        _dist(tmp_path / "a", ["License-Expression: MIT AND CC0-1.0"]), exceptions=table
    )
    assert ok.ok
    assert ok.exception == "CC0 covers one bundled file"
    changed = python.check_distribution(
        _dist(tmp_path / "b", ["License-Expression: MIT AND CC-BY-NC-4.0"]), exceptions=table
    )
    assert not changed.ok
    assert any("review it again" in p for p in changed.problems)


def test_tox_extras_and_roots(tmp_path: Path) -> None:
    (tmp_path / "plug").mkdir()
    (tmp_path / "plug" / "pyproject.toml").write_text('[project]\nname = "plug"\n')
    (tmp_path / "tox.ini").write_text(
        "[testenv]\nextras =\n    all\n    # a comment\n    unit: bench\n"
        "deps = {toxinidir}/plug\n    pyyaml>=6\n"
        "[testenv:lint]\nextras = all, lint\n"
    )
    assert python.tox_extras(tmp_path / "tox.ini") == {
        "testenv": {"all", "bench"},
        "testenv:lint": {"all", "lint"},
    }
    assert python.tox_roots(tmp_path) == {
        "vkgate": {"all", "bench", "lint"},
        "plug": set(),
        "pyyaml": set(),
    }


# --- docs/licences.md's blocks ---------------------------------------------------------------


def test_replace_block_rewrites_only_its_block() -> None:
    doc = "x\n<!-- begin generated: go -->\nold\n<!-- end generated: go -->\ny\n"
    new = report.replace_block(doc, "go", "new | row")
    assert new == "x\n<!-- begin generated: go -->\nnew | row\n<!-- end generated: go -->\ny\n"
    assert report.block(new, "go") == "new | row"
    assert report.block(new, "python") is None
    with pytest.raises(ValueError):
        report.replace_block(doc, "python", "z")
