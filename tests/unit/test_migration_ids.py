"""The yoyo migrations are derived from sql/released/ and sql/upgrades/; the
ids they carry are what databases migrated before recorded, so they must
stay exactly these."""

from __future__ import annotations

import itertools

from controlplane import migrate, schema

RECORDED = [
    "0001.office-0.1.0",
    "0002.office-0.2.0",
    "0003.office-0.3.0",
    "0004.office-0.4.0",
    "0005.office-0.5.0",
]


def test_ids_of_recorded_versions_do_not_change() -> None:
    ids = [m.id for m in migrate.migrations()]
    assert ids[: len(RECORDED)] == RECORDED
    assert ids[-1] == f"{len(ids):04d}.office-{schema.current_version()}"


def test_each_migration_applies_its_script_after_the_one_before() -> None:
    chain = list(migrate.migrations())
    versions = schema.versions()
    first = chain[0]
    first.load()
    assert first.depends == set()
    for (before, after), (source, target) in zip(
        itertools.pairwise(chain), itertools.pairwise(versions), strict=True
    ):
        after.load()
        assert after.depends == {before}
        (step,) = after.steps
        assert step.step._apply == migrate.upgrade_step(source, target)[0]
    (install,) = first.steps
    assert install.step._apply == migrate.version_step(versions[0])[0]
