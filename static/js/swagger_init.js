// Starts the vendored Swagger UI on /docs. A file rather than an inline script, so that the
// page's Content-Security-Policy can forbid inline script everywhere. validatorUrl: null keeps
// Swagger UI from sending the spec to an online validator (the app works offline).
const root = document.getElementById("swagger-ui");
window.ui = SwaggerUIBundle({
  url: root.dataset.openapiUrl,
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
