// Starts Swagger UI on /api.html; a file of its own, so that the page's
// Content-Security-Policy allows scripts from the service only.
window.onload = () => {
  window.ui = SwaggerUIBundle({ url: "api", dom_id: "#docs" });
};
