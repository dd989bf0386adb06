package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/littlebigbrain/lbb/internal/images"
)

func init() {
	commands["images"] = command{
		summary: "Build, list and prune the base images (images build|list|prune)",
		run:     runImages,
	}
}

const imagesUsage = `Usage:
  lbb images build [--mirror URL] [--images-dir DIR] [--json]   build the base image (and the microvm driver's guest
                                                                kernel and disk), or find them cached
  lbb images list  [--images-dir DIR] [--json]                  the images built, with versions
  lbb images prune [--images-dir DIR]                           remove images the current recipe does not build

The images directory is --images-dir, else $LBB_IMAGES_DIR, else <data-dir>/images, where
the data directory is --data-dir, else $LBB_DATA_DIR, else /var/lib/lbb. The Debian mirror
is --mirror, else $LBB_DEBIAN_MIRROR, else the one this machine's apt sources name.
`

func runImages(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, imagesUsage)
		return nil
	}
	fs := flag.NewFlagSet("images "+args[0], flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, imagesUsage) }
	dataDir := fs.String("data-dir", "", "data directory (default $LBB_DATA_DIR or /var/lib/lbb)")
	dir := fs.String("images-dir", "", "images directory (default $LBB_IMAGES_DIR or <data-dir>/images)")
	asJSON := fs.Bool("json", false, "print JSON")
	var mirror *string
	if args[0] == "build" {
		mirror = fs.String("mirror", "", "Debian archive URL (default $LBB_DEBIAN_MIRROR or the host's apt sources)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *dir == "" {
		*dir = images.DefaultDir(*dataDir)
	}

	switch args[0] {
	case "build":
		o := images.Options{Dir: *dir, Mirror: *mirror, Progress: os.Stderr}
		m, err := images.Build(ctx, o)
		if err != nil {
			return err
		}
		// What the microvm driver boots: the guest kernel and the image as a disk. The other
		// drivers do without, so a failure here is a warning (microvm's requirements say it).
		if _, err := images.BuildKernel(ctx, o); err != nil {
			fmt.Fprintf(os.Stderr, "warning: the microvm driver's guest kernel: %v\n", err)
		}
		if _, err := images.Disk(ctx, o, m); err != nil {
			fmt.Fprintf(os.Stderr, "warning: the microvm driver's disk of image %s: %v\n", m.ID, err)
		}
		if *asJSON {
			return printJSON(m)
		}
		return nil
	case "list":
		ms, err := images.List(*dir)
		if err != nil {
			return err
		}
		if *asJSON {
			if ms == nil {
				ms = []images.Manifest{}
			}
			return printJSON(ms)
		}
		if len(ms) == 0 {
			fmt.Fprintf(os.Stderr, "no images in %s; run `lbb images build`\n", *dir)
			return nil
		}
		// KERNEL is the microvm driver's guest kernel, when the image has its disk for it.
		kernel := "-"
		if k, err := images.CurrentKernel(*dir); err == nil {
			kernel = k.Recipe.Release
		}
		tw := table("ID", "CREATED", "SIZE", "PYTHON", "NUMPY", "PANDAS", "NODE", "KERNEL", "MISSING")
		for _, m := range ms {
			id := m.ID
			if m.Current {
				id += " *"
			}
			missing := orDash(strings.Join(m.Missing, ","))
			k := kernel
			if _, err := os.Stat(images.DiskPath(*dir, m)); err != nil {
				k = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, m.Created.Local().Format("2006-01-02 15:04"),
				imagesSizeMiB(m.SizeBytes), m.Versions["python"], m.Versions["numpy"], m.Versions["pandas"], m.Versions["node"], k, missing)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "* the current recipe's image; rootfs under %s/<id>/rootfs\n", *dir)
		fmt.Fprintf(os.Stderr, "KERNEL: the microvm driver's guest kernel, for an image whose disk is made (%s)\n", orDash(kernel))
		return nil
	case "prune":
		removed, err := images.Prune(*dir)
		for _, id := range removed {
			fmt.Printf("removed %s\n", filepath.Join(*dir, id))
		}
		if err == nil && len(removed) == 0 {
			fmt.Fprintln(os.Stderr, "nothing to prune")
		}
		return err
	default:
		fmt.Fprint(os.Stderr, imagesUsage)
		return errors.New("unknown images command " + args[0])
	}
}

func imagesSizeMiB(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
