package testenv

import "github.com/vishvananda/netlink"

func setLinkUp(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(l)
}
