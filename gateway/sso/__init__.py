"""Single sign-on: JWT bearer tokens for the admin API, OpenID Connect login for the console.

The policy's ``sso`` section (``gateway.policy.sso``) turns it on; ``SingleSignOn`` (``gate``) answers
who a caller is, ``sso_routes`` (``routes``) serves the console's login, callback and logout. authlib is
imported only once a policy has the section (``jwks``, ``tokens``, ``login``).
"""

from gateway.sso.gate import SingleSignOn
from gateway.sso.routes import sso_routes

__all__ = ["SingleSignOn", "sso_routes"]
