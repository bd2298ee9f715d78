module github.com/polylb/polylb/bindings/go

// 1.24: #cgo noescape / #cgo nocallback and runtime.AddCleanup.
go 1.24
