"""The web console: server-rendered pages (Jinja2 templates in templates/), a little JavaScript
and CSS (static/), all shipped in the package. Pages and actions are admin routes behind the same
login and ACLs as the JSON API; they never reach broker state except through gateway/admin/api.py
and gateway/admin/groups.py.
"""
