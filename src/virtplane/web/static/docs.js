// The API reference (/docs): Swagger UI over /openapi.json, from files shipped in the package,
// started from this file rather than an inline script, which the page's policy does not run.
/* global SwaggerUIBundle */
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null, // the public validator would be asked about our schema: never
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
