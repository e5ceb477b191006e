"""The Content-Security-Policy every answer carries (django-csp reads it from the settings,
which import it from here; docs/security.md)."""

from __future__ import annotations

# Only this site's own files run or style a page: no inline script, event handler or style
# attribute, no other host (htmx, plotly.js and Swagger UI are served from static/). A
# script injected into a page (a task name, a log line) does not run. data: images: Swagger
# UI's and plotly's icons. docs/security.md.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        # plotly.js (its basic bundle, static/vendor/) adds an empty <style> element that it
        # fills through the CSSOM (which the policy does not govern): allowed by hash; any
        # other inline style is not. A new plotly.js may add one: the browser tests then
        # name the hash to put here.
        "style-src": [
            "'self'",
            "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",  # the empty <style>
        ],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
