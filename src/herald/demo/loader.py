"""Load the demo school through the directory service, as a host's sync would.

Every call is an upsert, so loading twice leaves the same directory (and refreshes anything an
experiment changed). The caller owns the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.demo.school import School
from herald.directory import service as directory


@dataclass(frozen=True)
class LoadSummary:
    roles: int
    people: int
    people_created: int
    groups: int
    memberships: int
    guardianships: int

    def describe(self) -> str:
        return (
            f"{self.roles} roles, {self.people} people ({self.people_created} new), "
            f"{self.groups} groups, {self.memberships} memberships, "
            f"{self.guardianships} guardianships"
        )


async def load_school(conn: AsyncConnection, school: School) -> LoadSummary:
    tenant = school.tenant_id
    for role in school.roles:
        await directory.upsert_role(
            conn,
            tenant,
            role.code,
            directory.RoleInput(
                name=role.name,
                scope_kind=role.scope_kind,
                permissions=list(role.permissions),
                superadmin=role.superadmin,
            ),
        )
    people = await directory.upsert_people(
        conn,
        tenant,
        [
            directory.PersonBatchItem(
                external_id=person.external_id,
                full_name=person.full_name,
                email=person.email,
                phone=person.phone,
                locale=person.locale,
                timezone=person.timezone,
                country=person.country,
                roles=list(person.roles),
            )
            for person in school.people
        ],
    )
    for group in school.groups:
        await directory.upsert_group(
            conn, tenant, group.external_id, directory.GroupInput(name=group.name, kind=group.kind)
        )
    for membership in school.memberships:
        await directory.put_membership(
            conn, tenant, membership.group, membership.person, membership.member_role
        )
    for guardianship in school.guardianships:
        await directory.put_guardianship(conn, tenant, guardianship.student, guardianship.guardian)
    return LoadSummary(
        roles=len(school.roles),
        people=len(school.people),
        people_created=people.created,
        groups=len(school.groups),
        memberships=len(school.memberships),
        guardianships=len(school.guardianships),
    )
