// Package manifest is the pod source for running without a cluster: it reads
// Pods, ConfigMaps, Secrets, PersistentVolumes, PersistentVolumeClaims,
// StorageClasses (storage.k8s.io/v1) and the Node object from the YAML and
// JSON files directly inside one directory, and keeps them current with
// inotify and a slow, jittered resync. A file
// renamed into place is read at once; other changes once their name has been
// quiet for 50 ms (see changes.go). The directory is followed as a
// path: replaced by another one, or reached through a symlink that is
// swapped, it is read anew at once (see follow.go).
//
// Validate reads a directory once the same way, for volume-agent validate.
//
// It owns the file cache (the bytes of every file it read, the objects each
// file defined last time it was good) and the snapshot it hands out. It never
// touches volumes or the desired state itself.
//
// Invariants:
//
//   - A file with any problem is rejected whole and the last good content of
//     that file stays in force: a typo never makes a pod disappear. Only
//     deleting a file removes its objects.
//   - Fields are checked strictly, as kubectl apply does by default: an
//     unknown or repeated field, at any depth, is a problem like any other,
//     so a misspelt field is never dropped silently. Every problem names
//     its file, its line and, where there is one, the field path.
//   - An object is its kind, namespace and name, whichever file defines it:
//     moving it to another file, in one step or two, tears nothing down, and
//     a file that still defines an object in force keeps it against any
//     other file (see merge.go). What a file's content drops waits for the
//     file to settle (see settle.go).
//   - A replaced directory that is missing, or has no objects yet, makes
//     nothing look deleted (see replaced.go).
//   - The source is not synced until the first full scan is done and every
//     file present has parsed at least once since start, so the agent tears
//     down nothing it found on disk that might belong to a pod in a broken
//     file.
//   - Objects handed out are read-only snapshots: they are built fresh when a
//     file changes and never mutated afterwards.
//   - ConfigMap and Secret content never reaches a log line or a status
//     error: messages are built from our own words, field paths and key
//     names, never from document text or decoder messages about those kinds.
//   - Run starts no goroutine of its own besides the watcher, which it closes
//     (and so joins) before returning.
package manifest
