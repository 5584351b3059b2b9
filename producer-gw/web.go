package main

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"time"
)

// webFiles is the demo chat page: HTML, CSS and a JavaScript module on the
// TypeScript SDK, which speaks docs/protocol.md over the gateway's own
// WebSocket; nothing is loaded from another origin. web/sdk is the SDK's
// browser entry as client-ts compiles it (`go tool task web:sdk`),
// committed so the gateway builds without Node; client-ts's
// TestWebSDKFresh fails when it differs from a fresh build.
//
//go:embed web
var webFiles embed.FS

// webPolicy keeps the page to its own origin: its scripts, its styles and
// its WebSocket. 'self' covers ws: and wss: to the same host.
const webPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// mountWeb serves the page at GET /, its files at GET /app/<file> and the
// SDK's modules at GET /sdk/<file>. Anything else keeps falling through to
// the API's JSON 404.
func mountWeb(mux *http.ServeMux) {
	index, err := webFiles.ReadFile("web/index.html")
	if err != nil {
		panic("producer-gw: web/index.html not embedded: " + err.Error()) // a build without the page is a broken build
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		webHeaders(w)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	})
	serveWebDir(mux, "app")
	serveWebDir(mux, "sdk")
}

// serveWebDir serves the files of web/<dir> at GET /<dir>/<file>: one path
// segment, so no directories, no listings, no index redirects. The SDK's
// modules import each other by relative path, which stays in the segment.
func serveWebDir(mux *http.ServeMux, dir string) {
	files, err := fs.Sub(webFiles, "web/"+dir)
	if err != nil {
		panic("producer-gw: web/" + dir + " not embedded: " + err.Error()) // a build without the page is a broken build
	}
	mux.HandleFunc("GET /"+dir+"/{file}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		b, err := fs.ReadFile(files, name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		webHeaders(w)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
	})
}

func webHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", webPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// Embedded files carry no modification time: make browsers revalidate
	// so a rebuilt gateway is never shown with yesterday's script.
	h.Set("Cache-Control", "no-cache")
}
