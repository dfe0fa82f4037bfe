"""Identities from outside: who a user is and which groups they are in (an LDAP directory,
an OpenID Connect provider), and the group-to-role map that turns a login into a role
(``config``)."""
