package httpfast

import _ "embed"

// openAPIDoc is the OpenAPI 3.1 description of every route, body and
// error, served at GET /v1/openapi.json. The tests validate every
// response they see against it, so it cannot drift from the code.
//
//go:embed openapi.json
var openAPIDoc []byte
