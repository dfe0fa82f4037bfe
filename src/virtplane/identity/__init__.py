"""Identities from outside: who a user is and which groups they are in (LDAP), and the
group-to-role map that turns a login into a role (``config``)."""
