// Package doccheck keeps comments and docs true to the repository. Check reads every Go file's comments and every
// Markdown file and reports four kinds of Finding:
//
//   - a doc link (`[Name]`, `[Type.Method]`, `[pkg.Name]`, `[path/to/pkg.Name]`) in a doc comment of a non-test Go
//     file naming an identifier that does not exist, in this module, the standard library or a required module; and
//     a declaration's doc comment that starts with another declared name (a comment moved or merged by mistake);
//   - a repository path cited in a comment or doc (a path whose first element is a top-level entry of the repository or
//     an entry of the citing file's directory, or a relative Markdown link) that does not exist; a path written as
//     dir/pkg.Name must name an identifier of that package;
//   - an absolute path of a developer's machine (under /home, /Users or /work) in any text file;
//   - a comment or doc citing one of this project's issues by number: the history of a rule belongs in commit
//     messages, the comment states the rule.
//
// Comments of TypeScript, shell and YAML files are read for paths too.
//
// Paths made at run time are tolerated by one rule: a path that .gitignore ignores (build outputs, node_modules,
// local state) is not required to exist. Migrations (.sql) are read for machine paths only: their checksums cover
// their comments. Paths with placeholders (<name>, {a,b}, $VAR, %s) are not checked; globs
// must match at least one file. testdata directories are data, not docs, and are not read.
//
// The test of this package runs Check on the repository, so `go test ./...` (and `make test`) fails on a stale
// comment.
package doccheck
